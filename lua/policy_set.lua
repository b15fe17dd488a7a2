-- policy_set.lua: store a tenant's policy if its version is newer than the
-- stored one (newest wins, so agents can re-seed a Redis that lost its data
-- without undoing a later change), keep the index of live tenants, and
-- announce the change.  A deletion is kept only for a while.
--
-- KEYS[1]  policy hash rl:{t:<tenant>}:policy, fields version and json
-- KEYS[2]  optional: index set rl:tenants.  Only with a single Redis: in a
--          Redis Cluster it lives in another slot, so pass KEYS[1] alone and
--          SADD rl:tenants <tenant> before storing a policy (SREM after
--          storing a deletion).
-- ARGV[1]  tenant name  1 .. 63 of A-Z a-z 0-9 _ . -, first a letter or digit;
--          must be the name in KEYS[1]
-- ARGV[2]  version      integer, 1 .. 999999999999999
-- ARGV[3]  json         the policy; "" marks the tenant deleted (a tombstone
--          that keeps its version, so an older copy cannot bring it back)
-- ARGV[4]  tomb_ttl_ms  integer, 1 .. 999999999999: how long a tombstone is
--          kept (its key expires); ignored for a policy, whose key never does
-- Returns  {1, version} when stored; then PUBLISH rl:policy <tenant>.  A
--          policy adds the tenant to KEYS[2], a tombstone removes it: the
--          index names live tenants only.
--          {0, stored version} when the stored version is the same or newer;
--          nothing changes and nothing is published
-- Errors   "ERR rlgate: bad <arg> '<value>': expected ..." for invalid input.

if #KEYS < 1 or #KEYS > 2 then
	return redis.error_reply('ERR rlgate: policy_set takes 1 or 2 keys ' ..
		'(the policy, optionally rl:tenants)')
end
local name = ARGV[1]
if name == nil or #name > 63 or
   not string.match(name, '^[A-Za-z0-9][A-Za-z0-9_.-]*$') then
	return redis.error_reply("ERR rlgate: bad tenant name '" ..
		tostring(name) .. "': expected 1 to 63 characters from " ..
		"A-Z a-z 0-9 _ . -, starting with a letter or digit")
end
if KEYS[1] ~= 'rl:{t:' .. name .. '}:policy' then
	return redis.error_reply("ERR rlgate: bad key '" .. KEYS[1] ..
		"': expected rl:{t:" .. name .. "}:policy")
end
local s = ARGV[2]
if s == nil or not string.match(s, '^%d+$') or #s > 15 or tonumber(s) < 1 then
	return redis.error_reply("ERR rlgate: bad version '" .. tostring(s) ..
		"': expected a whole number from 1 to 999999999999999")
end
local version = tonumber(s)
local json = ARGV[3]
if json == nil then
	return redis.error_reply("ERR rlgate: bad json: missing (use '' to delete)")
end
local ttl = ARGV[4]
if ttl == nil or not string.match(ttl, '^%d+$') or #ttl > 12 or tonumber(ttl) < 1 then
	return redis.error_reply("ERR rlgate: bad tomb_ttl_ms '" .. tostring(ttl) ..
		"': expected a whole number from 1 to 999999999999")
end

local stored = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
if version <= stored then
	return {0, stored}
end
redis.call('HSET', KEYS[1], 'version', s, 'json', json)
if json == '' then
	redis.call('PEXPIRE', KEYS[1], ttl)
	if KEYS[2] then redis.call('SREM', KEYS[2], name) end
else
	redis.call('PERSIST', KEYS[1])
	if KEYS[2] then redis.call('SADD', KEYS[2], name) end
end
redis.call('PUBLISH', 'rl:policy', name)
return {1, version}
