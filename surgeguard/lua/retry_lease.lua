-- surgeguard fleet retry budget: requests and retries counted per time bucket for the whole
-- fleet; retry tokens granted while retries in the window stay within ratio * requests +
-- min_per_sec * window.
--
-- KEYS[1]  requests per bucket (a hash: bucket -> count)      (sg:{budget}:req)
-- KEYS[2]  retries granted per bucket (a hash: bucket -> count) (sg:{budget}:ret)
-- ARGV[1]  requests this instance counted since its last call (integer >= 0)
-- ARGV[2]  retry tokens wanted (integer >= 0)
-- ARGV[3]  ratio (retries per request, 0..10)
-- ARGV[4]  retries per second allowed with no traffic (>= 0)
-- ARGV[5]  the window, milliseconds (integer >= 1000)
-- ARGV[6]  lease TTL, milliseconds (integer >= 1)
--
-- Returns { granted, ttl_ms, 0, server time in us }. The window is 10 buckets of
-- window / 10; the current bucket and the 9 before it count. redis.call('TIME') is the only
-- clock. Bad arguments are script errors: nothing is written.

local function num(v, name, min, max, integer)
  local n = tonumber(v)
  if n == nil or n ~= n or n < min or n > max or (integer and n ~= math.floor(n)) then
    return nil, redis.error_reply('surgeguard: ' .. name .. ' out of range')
  end
  return n
end

local requests, e1 = num(ARGV[1], 'requests', 0, 9007199254740991, true)
if e1 then return e1 end
local want, e2 = num(ARGV[2], 'wanted', 0, 4294967295, true)
if e2 then return e2 end
local ratio, e3 = num(ARGV[3], 'ratio', 0, 10, false)
if e3 then return e3 end
local floor_rate, e4 = num(ARGV[4], 'min_per_sec', 0, 1e9, false)
if e4 then return e4 end
local window, e5 = num(ARGV[5], 'window_ms', 1000, 3600000, true)
if e5 then return e5 end
local ttl, e6 = num(ARGV[6], 'ttl_ms', 1, 3600000, true)
if e6 then return e6 end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local width = window * 1000 / 10
local bucket = math.floor(now / width)
local oldest = bucket - 9

if requests > 0 then
  redis.call('HINCRBY', KEYS[1], bucket, requests)
end

local function sum(key)
  local total = 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local b, c = tonumber(all[i]), tonumber(all[i + 1])
    if b == nil or c == nil or b < oldest then
      redis.call('HDEL', key, all[i])
    elseif b <= bucket then
      total = total + c
    end
  end
  return total
end

local req = sum(KEYS[1])
local ret = sum(KEYS[2])
local allowed = math.floor(ratio * req + floor_rate * window / 1000) - ret
local g = math.max(0, math.min(want, allowed))
if g > 0 then
  redis.call('HINCRBY', KEYS[2], bucket, g)
end
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('PEXPIRE', KEYS[2], window * 2)
return { g, ttl, 0, now }
