-- heartbeat.lua: mark one running agent alive for ttl_ms more, forget agents
-- whose time ran out, count the live ones (the fleet size for static shares),
-- and tell the caller when another agent heartbeats with its agent id (two
-- hosts with the same id: counted apart, never merged into one).
--
-- KEYS[1]  sorted set rl:agents, member = "<agent id>/<nonce>" (one per
--          running agent), score = expiry time in Redis milliseconds (TIME)
-- KEYS[2]  hash rl:agent_ids, field = agent id, value = the nonce of the
--          agent that heartbeated with that id last
-- ARGV[1]  agent id   1 .. 256 bytes, any characters
-- ARGV[2]  ttl_ms     integer, 1 .. 86400000
-- ARGV[3]  nonce      16 hex digits (0-9 a-f), drawn at random by each
--                     agent process
-- ARGV[4]  first      1 on the agent's first heartbeat since it connected,
--                     else 0.  A first heartbeat takes the id over: a live
--                     entry of the id under another nonce is taken to be
--                     this host's previous agent (killed and restarted) and
--                     removed at once.  Should it be another host's, that
--                     host adds it back at its next heartbeat.
-- Returns  {live, other}
--          live   the number of live agents, this one included
--          other  the nonce of another live agent that heartbeated with
--                 this id since this agent's last heartbeat, else "".  On
--                 any heartbeat but the first, a nonce here means two
--                 agents run with the same id.
-- Errors   "ERR rlgate: bad <arg> '<value>': expected ..." for invalid ARGV.
-- An agent is live while its expiry is later than Redis's time now.  Expired
-- members go, with their rl:agent_ids field while it still names them; both
-- keys expire when the last member does.

if #KEYS ~= 2 then
	return redis.error_reply('ERR rlgate: heartbeat takes 2 keys ' ..
		'(rl:agents, rl:agent_ids)')
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
local nonce = ARGV[3]
if nonce == nil or #nonce ~= 16 or not string.match(nonce, '^[0-9a-f]+$') then
	return redis.error_reply("ERR rlgate: bad nonce '" .. tostring(nonce) ..
		"': expected 16 hex digits 0-9 a-f")
end
local first = ARGV[4]
if first ~= '0' and first ~= '1' then
	return redis.error_reply("ERR rlgate: bad first '" .. tostring(first) ..
		"': expected 0 or 1")
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local other = redis.call('HGET', KEYS[2], id)
if other and other ~= nonce then
	local score = tonumber(redis.call('ZSCORE', KEYS[1], id .. '/' .. other))
	if score == nil or score <= now then
		other = ''
	elseif first == '1' then
		redis.call('ZREM', KEYS[1], id .. '/' .. other)
	end
else
	other = ''
end
redis.call('ZADD', KEYS[1], now + ttl, id .. '/' .. nonce)
redis.call('HSET', KEYS[2], id, nonce)

local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, m in ipairs(gone) do
	local gid = string.sub(m, 1, -18)
	if string.sub(m, -17, -17) == '/' and
	   redis.call('HGET', KEYS[2], gid) == string.sub(m, -16) then
		redis.call('HDEL', KEYS[2], gid)
	end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return {redis.call('ZCARD', KEYS[1]), other}
