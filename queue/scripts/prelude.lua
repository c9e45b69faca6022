-- prelude.lua: what every queue script shares. Each script is this prelude
-- and one main (push.lua, pop.lua, ack.lua, len.lua), so each operation is
-- one EVALSHA, atomic on the server.
--
-- KEYS, the same for every script and all in one {hash tag}, so one cluster
-- slot:
--   KEYS[1] due       ZSET  job id -> slot (µs)
--   KEYS[2] inflight  ZSET  job id -> visibility deadline (µs)
--   KEYS[3] data      HASH  job id -> payload
--   KEYS[4] meta      HASH  job id -> deliveries so far
--   KEYS[5] state     HASH  u, r, scale, last, seq: the schedule and the
--                     last id's sequence number
-- ARGV[1..5] (push and pop): rate, period (µs), burst, now (µs; -1 for the
-- server's TIME), the state's TTL margin (µs).
--
-- The job keys have no TTL: they hold jobs nobody has acknowledged, and
-- Redis deletes each one when it empties. The state key expires once it is
-- equivalent to fresh (D and last + T both past), plus the margin, so an
-- empty queue leaves nothing behind.
--
-- Lua numbers are doubles: every quantity stays below 2^53 (algo's
-- Params.Validate bounds them), where doubles hold integers exactly.
-- Division is the one operation that rounds, so it goes through fdiv.

local rate, period, burst, now, margin

local function clock(t)
  if t < 0 then
    local s = redis.call('TIME')
    t = tonumber(s[1]) * 1000000 + tonumber(s[2])
  end
  return t
end

local function setup()
  rate, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
  now = clock(tonumber(ARGV[4]))
  margin = tonumber(ARGV[5])
end

-- ⌊a/b⌋ for 0 ≤ a, 0 < b below 2^53: the double quotient, corrected by one.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function cdiv(a, b)
  return fdiv(a + b - 1, b)
end

-- ⌈a/b⌉ for any a, 0 < b (ceilDivSigned).
local function cdiv_signed(a, b)
  if a >= 0 then
    return cdiv(a, b)
  end
  return -fdiv(-a, b)
end

-- An integer as Redis should read it: never in exponent form.
local function int(x)
  return string.format('%d', x)
end

-- The schedule (schedule.go): D = u + r/scale µs, the next free slot; last,
-- the latest release (-1: none); seq, the last id's sequence number.
local function load()
  local v = redis.call('HMGET', KEYS[5], 'u', 'r', 'scale', 'last', 'seq')
  return {
    u = tonumber(v[1]) or 0, r = tonumber(v[2]) or 0, scale = tonumber(v[3]) or 0,
    last = tonumber(v[4]) or -1, seq = tonumber(v[5]) or 0,
  }
end

local function settle(s)
  if s.scale ~= rate then
    if s.r ~= 0 then
      s.u, s.r = s.u + 1, 0
    end
    s.scale = rate
  end
  if s.u < now or (s.u == now and s.r == 0) then
    s.u, s.r = now, 0
  end
end

-- The slot (rounded up to the µs) and 0, or nil and the retry wait (take).
local function take(s, force)
  settle(s)
  local retry = s.u - now + cdiv_signed(s.r - burst * period, rate)
  if retry > 0 and not force then
    return nil, retry
  end
  local slot = s.u
  if s.r > 0 then
    slot = slot + 1
  end
  s.r = s.r + period
  local q = fdiv(s.r, rate)
  s.u, s.r = s.u + q, s.r - q * rate
  return slot, 0
end

local function earliest(s, slot)
  if s.last >= 0 then
    slot = math.max(slot, s.last + cdiv(period, rate))
  end
  return slot
end

-- Stores the schedule with a TTL ending when it is equivalent to fresh,
-- plus the margin.
local function save(s)
  redis.call('HSET', KEYS[5], 'u', int(s.u), 'r', int(s.r), 'scale', int(s.scale),
    'last', int(s.last), 'seq', int(s.seq))
  local fresh = s.u
  if s.r > 0 then
    fresh = fresh + 1
  end
  if s.last >= 0 then
    fresh = math.max(fresh, s.last + cdiv(period, rate))
  end
  redis.call('PEXPIRE', KEYS[5], cdiv(math.max(fresh - now, 0) + margin, 1000))
end
