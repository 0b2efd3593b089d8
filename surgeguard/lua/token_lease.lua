-- surgeguard fleet token lease: one GCRA per limit, decided on the server's clock.
--
-- KEYS[1]  the limit's GCRA arrival time, microseconds   (sg:{limit}:tat)
-- KEYS[2]  the limit's members: instance -> last ask, us  (sg:{limit}:members)
-- KEYS[3]  the grant log (a list), written when ARGV[7] is "1" (sg:{limit}:log)
-- ARGV[1]  instance id (any bytes)
-- ARGV[2]  tokens wanted (integer >= 1)
-- ARGV[3]  emission interval T, microseconds (1 / rate; integer >= 1)
-- ARGV[4]  burst B (integer >= 1); the tolerance is T * (B - 1)
-- ARGV[5]  lease TTL, milliseconds (integer >= 1)
-- ARGV[6]  membership window, milliseconds: instances that asked within it make the fleet
-- ARGV[7]  "1" to append "time_us instance granted" to the grant log
--
-- Returns { granted, ttl_ms, fleet_size, server time in us }. granted = min(wanted, tokens conforming now):
-- the GCRA's any-n rule (governor): with tat' = max(tat, now) + n * T, n conforms while
-- tat' - now <= tau + T. redis.call('TIME') is the only clock: client clocks never decide.
-- Errors (bad arguments) are script errors: nothing is written.

local function int(v, name, min)
  local n = tonumber(v)
  if n == nil or n ~= math.floor(n) or n < min or n > 9007199254740991 then
    return redis.error_reply('surgeguard: ' .. name .. ' must be an integer >= ' .. min)
  end
  return n
end

local want = int(ARGV[2], 'wanted', 1)
if type(want) == 'table' then return want end
local t = int(ARGV[3], 'emission_us', 1)
if type(t) == 'table' then return t end
local burst = int(ARGV[4], 'burst', 1)
if type(burst) == 'table' then return burst end
local ttl = int(ARGV[5], 'ttl_ms', 1)
if type(ttl) == 'table' then return ttl end
local window = int(ARGV[6], 'window_ms', 1)
if type(window) == 'table' then return window end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tau = t * (burst - 1)

local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local base = math.max(tat, now)
-- n conforms while base + n*T - now <= tau + T
local n = math.floor((tau + t - (base - now)) / t)
if n < 0 then n = 0 end
if n > want then n = want end
if n > 0 then
  local new = base + n * t
  -- The key lives as long as it matters: until the arrival time has passed.
  redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.max(1, math.ceil((new - now) / 1000) + 1000))
end

redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window * 1000)
redis.call('PEXPIRE', KEYS[2], window * 2)
local fleet = redis.call('ZCARD', KEYS[2])

if ARGV[7] == '1' and n > 0 then
  redis.call('RPUSH', KEYS[3], string.format('%.0f', now) .. ' ' .. ARGV[1] .. ' ' .. n)
end
return { n, ttl, fleet, now }
