-- deregister.lua: remove one agent from the live set on clean shutdown, so
-- the others' count drops at once instead of after its ttl.
--
-- KEYS[1]  sorted set rl:agents (see heartbeat.lua)
-- ARGV[1]  agent id   1 .. 256 bytes
-- Returns  the number of live agents left
-- Errors   "ERR rlgate: bad agent id ..." for an empty or too long id.
-- Removing an id that is not there is not an error.

if #KEYS ~= 1 then
	return redis.error_reply('ERR rlgate: deregister takes 1 key (rl:agents)')
end
local id = ARGV[1]
if id == nil or #id == 0 or #id > 256 then
	return redis.error_reply("ERR rlgate: bad agent id '" .. tostring(id) ..
		"': expected 1 to 256 bytes")
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
