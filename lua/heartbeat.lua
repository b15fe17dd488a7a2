-- heartbeat.lua: mark one agent alive for ttl_ms more, forget agents whose
-- time ran out, and count the live ones (the fleet size for static shares).
--
-- KEYS[1]  sorted set rl:agents, member = agent id, score = expiry time in
--          Redis milliseconds (TIME)
-- ARGV[1]  agent id   1 .. 256 bytes, any characters
-- ARGV[2]  ttl_ms     integer, 1 .. 86400000
-- Returns  the number of live agents, this one included
-- Errors   "ERR rlgate: bad <arg> '<value>': expected ..." for invalid ARGV.
-- An agent is live while its expiry is later than Redis's time now.  The set
-- expires when its last member does.

if #KEYS ~= 1 then
	return redis.error_reply('ERR rlgate: heartbeat takes 1 key (rl:agents)')
end
local id = ARGV[1]
if id == nil or #id == 0 or #id > 256 then
	return redis.error_reply("ERR rlgate: bad agent id '" .. tostring(id) ..
		"': expected 1 to 256 bytes")
end
local s = ARGV[2]
if s == nil or not string.match(s, '^%d+$') or #s > 8 or
   tonumber(s) < 1 or tonumber(s) > 86400000 then
	return redis.error_reply("ERR rlgate: bad ttl_ms '" .. tostring(s) ..
		"': expected a whole number from 1 to 86400000")
end
local ttl = tonumber(s)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZADD', KEYS[1], now + ttl, id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return redis.call('ZCARD', KEYS[1])
