-- surgeguard fleet slot lease: in-flight slots of a fleet-wide cap, leased with a TTL.
--
-- KEYS[1]  the cap's leases: instance -> "slots expiry_us"   (sg:{cap}:slots)
-- KEYS[2]  the grant log (a list), written when ARGV[5] is "1" (sg:{cap}:log)
-- ARGV[1]  instance id (any bytes)
-- ARGV[2]  slots wanted (integer >= 0; 0 gives the lease back)
-- ARGV[3]  the cap C (integer >= 1)
-- ARGV[4]  lease TTL, milliseconds (integer >= 1)
-- ARGV[5]  "1" to append "time_us instance slots" to the grant log
--
-- Returns { slots, ttl_ms, fleet_size, server time in us }: slots = min(wanted, C - slots of the other
-- unexpired leases); expired leases are purged first, so a crashed instance's slots come
-- back once its lease has run out. redis.call('TIME') is the only clock.

local function int(v, name, min)
  local n = tonumber(v)
  if n == nil or n ~= math.floor(n) or n < min or n > 9007199254740991 then
    return redis.error_reply('surgeguard: ' .. name .. ' must be an integer >= ' .. min)
  end
  return n
end

local want = int(ARGV[2], 'wanted', 0)
if type(want) == 'table' then return want end
local cap = int(ARGV[3], 'cap', 1)
if type(cap) == 'table' then return cap end
local ttl = int(ARGV[4], 'ttl_ms', 1)
if type(ttl) == 'table' then return ttl end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local others, fleet = 0, 1
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local who, v = all[i], all[i + 1]
  local s, e = string.match(v, '^(%d+) (%d+)$')
  s, e = tonumber(s), tonumber(e)
  if s == nil or e == nil or e <= now then
    redis.call('HDEL', KEYS[1], who)
  elseif who ~= ARGV[1] then
    others = others + s
    fleet = fleet + 1
  end
end

local g = math.max(0, math.min(want, cap - others))
if g > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], g .. ' ' .. string.format('%.0f', now + ttl * 1000))
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
if ARGV[5] == '1' then
  redis.call('RPUSH', KEYS[2], string.format('%.0f', now) .. ' ' .. ARGV[1] .. ' ' .. g)
end
return { g, ttl, fleet, now }
