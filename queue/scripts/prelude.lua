-- prelude.lua: what every queue script shares. Each script is the helpers
-- every sluice script starts with (internal/redisrun/lua/helpers.lua: clock,
-- fdiv, cdiv), this prelude and one main (push.lua, pop.lua, ack.lua,
-- len.lua), so each operation is one EVALSHA, atomic on the server.
--
-- KEYS, the same for every script and all in one {hash tag}, so one cluster
-- slot:
--   KEYS[1] due       ZSET  job id -> slot (µs)
--   KEYS[2] inflight  ZSET  job id -> visibility deadline (µs)
--   KEYS[3] data      HASH  job id -> payload
--   KEYS[4] meta      HASH  job id -> deliveries so far
--   KEYS[5] state     the schedule and the last id's sequence number, packed
--                     as the store packs a key's state (see load)
-- ARGV[1..5] (push and pop): rate, period (µs), burst, now (µs; -1 for the
-- server's TIME), the state's TTL margin (µs).
--
-- The job keys have no TTL: they hold jobs nobody has acknowledged, and
-- Redis deletes each one when it empties. The state key expires once it is
-- equivalent to fresh (D and last + T both past), plus the margin, so an
-- empty queue leaves nothing behind.

local rate, period, burst, now, margin

local function setup()
  rate, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
  now = clock(tonumber(ARGV[4]))
  margin = tonumber(ARGV[5])
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
-- the latest release (-1: none); seq, the last id's sequence number. It is
-- stored packed, five little-endian 8-byte integers (u, r, scale, last,
-- seq), as the store packs its states: one C call each way. A value of
-- another length is not the queue's: an error, never read as fresh.
local function load()
  local raw = call('GET', KEYS[5])
  if not raw then
    return {u = 0, r = 0, scale = 0, last = -1, seq = 0}
  end
  if #raw ~= 40 then
    error('sluice: foreign data at key ' .. KEYS[5] .. ': it holds a value sluice did not write')
  end
  local u, r, scale, last, seq = unpack('<i8i8i8i8i8', raw)
  return {u = u, r = r, scale = scale, last = last, seq = seq}
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
    slot = max(slot, s.last + cdiv(period, rate))
  end
  return slot
end

-- Stores the schedule with a TTL ending when it is equivalent to fresh,
-- plus the margin.
local function save(s)
  local fresh = s.u
  if s.r > 0 then
    fresh = fresh + 1
  end
  if s.last >= 0 then
    fresh = max(fresh, s.last + cdiv(period, rate))
  end
  call('SET', KEYS[5], pack('<i8i8i8i8i8', s.u, s.r, s.scale, s.last, s.seq),
    'PX', cdiv(max(fresh - now, 0) + margin, 1000))
end
