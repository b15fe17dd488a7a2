-- agents.lua: count the live agents without changing anything (safe on a
-- replica with EVALSHA_RO).
--
-- KEYS[1]  sorted set rl:agents (see heartbeat.lua)
-- ARGV     none
-- Returns  the number of agents whose expiry is later than Redis's time now
--          (0 when the set is missing)

if #KEYS ~= 1 then
	return redis.error_reply('ERR rlgate: agents takes 1 key (rl:agents)')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
