-- policy_get.lua: read a tenant's stored policy and its version.
--
-- KEYS[1]  policy hash rl:{t:<tenant>}:policy (see policy_set.lua)
-- ARGV     none
-- Returns  {version, json}; {0, ""} when no policy was ever stored.
--          A version with json "" is a deleted tenant.

if #KEYS ~= 1 then
	return redis.error_reply('ERR rlgate: policy_get takes 1 key (the policy)')
end
local p = redis.call('HMGET', KEYS[1], 'version', 'json')
local version = tonumber(p[1])
if version == nil then
	return {0, ''}
end
return {version, p[2] or ''}
