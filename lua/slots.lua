-- slots.lua: hold some of one tenant's connection slots - its cap on
-- connections in flight, shared by the fleet - for a while.  Holdings are
-- kept per holder and expire with it: a holder that stops calling loses its
-- slots after ttl_ms, on Redis's clock (TIME), without anyone's help.
--
-- KEYS[1]  hash rl:{t:<tenant>}:slots, field = holder, value = slots it
--          holds (a whole number >= 1)
-- KEYS[2]  sorted set rl:{t:<tenant>}:slot_exp, member = holder, score =
--          when its holding expires, in Redis milliseconds
-- ARGV[1]  cap      integer, 0 .. 131072: the tenant's max-conns
-- ARGV[2]  holder   1 .. 300 bytes: "<agent id>/<nonce>", one per running
--                   agent (a restarted agent is a new holder)
-- ARGV[3]  want     integer, 0 .. 131072: the holding the caller asks for
--                   now, in all (its connections in flight and room for
--                   more), not an increment; 0 gives everything back
-- ARGV[4]  ttl_ms   integer, 1 .. 86400000: how long the holding lasts
--                   without another call
-- Returns  {held, free}
--          held  what the caller holds from now on: want, or what the cap
--                leaves beside the other live holders if that is less (a
--                lowered cap takes slots back this way); never more than
--                want, so giving back always succeeds
--          free  slots no live holder holds
-- Errors   "ERR rlgate: bad <arg> '<value>': expected ..." for invalid ARGV,
--          before anything is read or written.
-- Expired holders are removed first: their slots are free again.  A holder
-- left with 0 is removed.  Both keys expire when the last holding does.
-- The sum of all live holdings never exceeds the cap (each call grants at
-- most what the others leave), so a fleet whose hosts admit only what they
-- hold never has more than the cap in flight.

if #KEYS ~= 2 then
	return redis.error_reply('ERR rlgate: slots takes 2 keys ' ..
		'(rl:{t:<tenant>}:slots, rl:{t:<tenant>}:slot_exp)')
end

local function arg_int(i, name, lo, hi)
	local s = ARGV[i]
	if s == nil or not string.match(s, '^%d+$') or #s > 15 or
	    tonumber(s) < lo or tonumber(s) > hi then
		return nil, redis.error_reply(string.format(
			"ERR rlgate: bad %s '%s': expected a whole number from %d to %d",
			name, tostring(s), lo, hi))
	end
	return tonumber(s)
end

local cap, err = arg_int(1, 'cap', 0, 131072)
if not cap then return err end
local holder = ARGV[2]
if holder == nil or #holder == 0 or #holder > 300 then
	return redis.error_reply("ERR rlgate: bad holder '" .. tostring(holder) ..
		"': expected 1 to 300 bytes")
end
local want
want, err = arg_int(3, 'want', 0, 131072)
if not want then return err end
local ttl
ttl, err = arg_int(4, 'ttl_ms', 1, 86400000)
if not ttl then return err end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Holders whose time ran out hold nothing any more.
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #dead > 0 then
	redis.call('HDEL', KEYS[1], unpack(dead))
	redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end

local others = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
	if all[i] ~= holder then
		others = others + tonumber(all[i + 1])
	end
end

local room = cap - others
if room < 0 then room = 0 end
local held = want
if held > room then held = room end

if held > 0 then
	redis.call('HSET', KEYS[1], holder, held)
	redis.call('ZADD', KEYS[2], now + ttl, holder)
else
	redis.call('HDEL', KEYS[1], holder)
	redis.call('ZREM', KEYS[2], holder)
end

local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last > 0 then
	local ms = tonumber(last[2]) - now + 1000
	redis.call('PEXPIRE', KEYS[1], ms)
	redis.call('PEXPIRE', KEYS[2], ms)
end

return {held, room - held}
