-- lease.lua: take up to `want` whole tokens from one tenant's global bucket.
-- The bucket refills from Redis's own clock (TIME); exact integer arithmetic,
-- no fraction of a token is ever lost or minted (proof in docs/redis.md).
--
-- KEYS[1]  bucket hash, rl:{t:<tenant>}:bucket
--          fields: tokens (whole tokens), frac (part of the next token, in
--          1/3600000000ths), ts (Redis time of the last update, microseconds)
-- ARGV[1]  rate count       integer, 1 .. 1e9 * period
-- ARGV[2]  period seconds   1, 60 or 3600
-- ARGV[3]  burst            integer, 1 .. 1e8 (bucket capacity)
-- ARGV[4]  want             integer, 0 .. 1e8 (0: only report the count)
-- ARGV[5]  min chunk        integer, 1 .. 1e8 (smallest lease worth a call)
-- Returns  {granted, remaining, wait_ms}
--          granted    whole tokens taken, min(want, tokens in the bucket)
--          remaining  whole tokens left in the bucket
--          wait_ms    0 when granted == want; otherwise the milliseconds until
--                     min(want, min chunk, burst) tokens will be in the bucket
--                     if nobody else takes any (rounded up)
-- Errors   "ERR rlgate: bad <arg> '<value>': expected ..." for invalid ARGV,
--          before anything is read or written.
-- A missing bucket starts full.  A burst below the stored count clamps it.
-- The key expires once the bucket would be full again (plus a second): a
-- bucket that reappears full is in the state it would have reached anyway.

-- common: begin (identical in lease.lua and refund.lua)
-- One token is U units (us per hour): a rate of k tokens per hour adds
-- exactly k units per us.
local U = 3600000000
local MARGIN_MS = 1000

local function arg_int(i, name, lo, hi)
	local s = ARGV[i]
	if s == nil or not string.match(s, '^%d+$') or #s > 15 then
		return nil, redis.error_reply(string.format(
			"ERR rlgate: bad %s '%s': expected a whole number from %d to %d",
			name, tostring(s), lo, hi))
	end
	local v = tonumber(s)
	if v < lo or v > hi then
		return nil, redis.error_reply(string.format(
			"ERR rlgate: bad %s '%s': expected a whole number from %d to %d",
			name, s, lo, hi))
	end
	return v
end

-- Exact floor division of non-negative integers below 2^53; the correction
-- guards against the quotient rounding up to the next integer.
local function divmod(a, b)
	local q = math.floor(a / b)
	local r = a - q * b
	if r < 0 then q = q - 1; r = r + b
	elseif r >= b then q = q + 1; r = r - b end
	return q, r
end

-- Milliseconds (rounded up) until the bucket gains n >= 1 more whole tokens,
-- given frac units already accrued, at k units per microsecond.  The wanted
-- amount n*U - frac may exceed 2^53, so it is split at whole tokens.
local function ms_until(n, frac, k)
	local qa, ra = divmod((n - 1) * 3600000, k)
	local q, r = divmod(ra * 1000 + U - frac, 1000 * k)
	if r > 0 then q = q + 1 end
	return qa + q
end

-- Refills the bucket state {tokens, frac} over elapsed microseconds at k
-- units per microsecond, capped at burst.  Every product stays below 2^53.
local function refill(tokens, frac, elapsed, k, burst)
	-- Also clamps a bucket whose burst was lowered below its tokens.
	if tokens >= burst then return burst, 0 end
	local s, us = divmod(elapsed, 1000000)
	-- Whole seconds: s*k / 3600 tokens.  Past the time to fill, the product
	-- is not needed (and might not be exact).
	if s * k >= (burst - tokens) * 3600 then return burst, 0 end
	local add, rem = divmod(s * k, 3600)
	-- The microseconds: us*k units, k split at whole tokens per microsecond.
	local kq, kr = divmod(k, U)
	local carry
	carry, frac = divmod(frac + rem * 1000000 + us * kr, U)
	tokens = tokens + add + us * kq + carry
	if tokens >= burst then return burst, 0 end
	return tokens, frac
end
-- common: end

if #KEYS ~= 1 then
	return redis.error_reply('ERR rlgate: lease takes 1 key (the bucket)')
end
local period = ({['1'] = 1, ['60'] = 60, ['3600'] = 3600})[ARGV[2]]
if period == nil then
	return redis.error_reply("ERR rlgate: bad period '" .. tostring(ARGV[2]) ..
		"': expected 1, 60 or 3600")
end
local count, err = arg_int(1, 'rate count', 1, 1000000000 * period)
if err then return err end
local burst
burst, err = arg_int(3, 'burst', 1, 100000000)
if err then return err end
local want
want, err = arg_int(4, 'want', 0, 100000000)
if err then return err end
local chunk
chunk, err = arg_int(5, 'min chunk', 1, 100000000)
if err then return err end

local k = count * (3600 / period)   -- tokens per hour = units per us
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local b = redis.call('HMGET', KEYS[1], 'tokens', 'frac', 'ts')
local tokens, frac, ts = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
if tokens == nil or frac == nil or ts == nil then
	tokens, frac, ts = burst, 0, now
end
-- Redis time stepping back (failover to a host whose clock is behind)
-- refills nothing; counting on from the new clock mints nothing either.
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens, frac = refill(tokens, frac, elapsed, k, burst)

local granted = math.min(want, tokens)
tokens = tokens - granted

local wait = 0
if granted < want then
	wait = ms_until(math.min(want, chunk, burst) - tokens, frac, k)
end

redis.call('HSET', KEYS[1], 'tokens', tokens, 'frac', frac, 'ts', now)
local ttl = MARGIN_MS
if tokens < burst then ttl = ttl + ms_until(burst - tokens, frac, k) end
redis.call('PEXPIRE', KEYS[1], ttl)

return {granted, tokens, wait}
