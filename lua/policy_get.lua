-- policy_get.lua: read stored policies and their versions, one tenant or
-- many in one call (a sync of a whole store in a bounded number of calls).
--
-- KEYS     one or more policy hashes rl:{t:<tenant>}:policy (see
--          policy_set.lua); on a Redis Cluster all in one slot
-- ARGV     none
-- Returns  {version_1, json_1, version_2, json_2, ...}, a pair per key in
--          the order of KEYS; {0, ""} when no policy was ever stored.  A
--          version with json "" is a deleted tenant.

if #KEYS < 1 then
	return redis.error_reply('ERR rlgate: policy_get takes 1 or more keys (the policies)')
end
local out = {}
for i = 1, #KEYS do
	local p = redis.call('HMGET', KEYS[i], 'version', 'json')
	local version = tonumber(p[1])
	if version == nil then
		out[#out + 1] = 0
		out[#out + 1] = ''
	else
		out[#out + 1] = version
		out[#out + 1] = p[2] or ''
	end
end
return out
