-- deregister.lua: remove one running agent from the live set on clean
-- shutdown, so the others' count drops at once instead of after its ttl.
--
-- KEYS[1]  sorted set rl:agents (see heartbeat.lua)
-- KEYS[2]  hash rl:agent_ids (see heartbeat.lua)
-- ARGV[1]  agent id   1 .. 256 bytes
-- ARGV[2]  nonce      16 hex digits, the agent's own (see heartbeat.lua)
-- Returns  the number of live agents left
-- Errors   "ERR rlgate: bad <arg> ..." for an invalid id or nonce.
-- Removing an agent that is not there is not an error.  The id's field in
-- rl:agent_ids goes only while it names this agent: another agent with the
-- same id keeps its own.

if #KEYS ~= 2 then
	return redis.error_reply('ERR rlgate: deregister takes 2 keys ' ..
		'(rl:agents, rl:agent_ids)')
end
local id = ARGV[1]
if id == nil or #id == 0 or #id > 256 then
	return redis.error_reply("ERR rlgate: bad agent id '" .. tostring(id) ..
		"': expected 1 to 256 bytes")
end
local nonce = ARGV[2]
if nonce == nil or #nonce ~= 16 or not string.match(nonce, '^[0-9a-f]+$') then
	return redis.error_reply("ERR rlgate: bad nonce '" .. tostring(nonce) ..
		"': expected 16 hex digits 0-9 a-f")
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], id .. '/' .. nonce)
if redis.call('HGET', KEYS[2], id) == nonce then
	redis.call('HDEL', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
