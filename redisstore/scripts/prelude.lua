-- prelude.lua: what every script shares. sluice builds each script from this
-- prelude, the step of one algorithm (or of all, for composites) and a main
-- (single.lua or composite.lua), so each decision stays one EVALSHA.
--
-- It comes after the helpers every sluice script shares
-- (internal/redisrun/lua/helpers.lua: clock, fdiv, cdiv, the library
-- functions as locals).
--
-- A key's state is one string, packed (see load), always with a TTL.

-- now is the decision's time (µs) and margin the TTL margin (µs); the main
-- sets them. steps[kind] is each algorithm's step, the twin of its Go step
-- in package algo: step(rate, period, burst, debt, cost, max_delay, ...)
-- over the state the main loaded (the values of load: kind, a, b, c, rate,
-- period, raw), as the Go step works on a State; debt is the limit's debt
-- allowance (0 but under the algorithms that can carry one). It returns
-- the decision, the fields to store (nil: store nothing) and the time the
-- state is equivalent to fresh; the main stores them (store). The Go step
-- updates its State in place instead: a Lua table per decision would cost
-- the server more than the values. charges[kind] is the charge of
-- token-bucket, gcra, fixed-window and aligned-window (algo.Charge):
-- charge(rate, period, burst, debt, units, ...) for units > 0, the same
-- returns, always fields to store.
local now, margin
local steps, charges = {}, {}

-- A charge of units under kind at now (algo.Charge): charges[kind], or a
-- query (the step of cost 0) for units 0. The values after units are the
-- state load returned.
local function charge(kind, rate, period, burst, debt, units, ...)
  if units == 0 then
    return steps[kind](rate, period, burst, debt, 0, huge, ...)
  end
  return charges[kind](rate, period, burst, debt, units, ...)
end

-- A max delay argument (µs), -1 for none.
local function delay_bound(x)
  if x < 0 then
    return huge
  end
  return x
end

-- A state is stored packed: its kind in one byte, then each field as a
-- little-endian 8-byte integer (struct.pack and unpack: one C call each way,
-- where decimal text would take a match, a format and a tonumber per field).
-- A single-state kind is 41 bytes: kind, a, b, c and the rate and period of
-- the limit that wrote it; a sliding log (kind 6) is its kind, rate and
-- period, then its (time, cost) pairs.

-- The state at key: nil when there is none; else its kind, fields a, b, c
-- (nil for a log), the rate and period that wrote it, and the raw string
-- (a log's pairs are read from it). Values, not a table, spare the server a
-- table per decision. A value sluice did not write (another program's, or
-- a layout it does not know) is an error, never read as fresh: writing over
-- it would destroy another program's data.
local function load(key)
  local raw = call('GET', key)
  if not raw then
    return nil
  end
  local n = #raw
  if n == 41 then
    local k, a, b, c, r, p = unpack('<Bi8i8i8i8i8', raw)
    if k >= 1 and k <= 7 and k ~= 6 and r > 0 and p > 0 then
      return k, a, b, c, r, p, raw
    end
  elseif n >= 17 and (n - 17) % 16 == 0 and string.byte(raw, 1) == 6 then
    local _, r, p = unpack('<Bi8i8', raw)
    if r > 0 and p > 0 then
      return 6, nil, nil, nil, r, p, raw
    end
  end
  error('sluice: foreign data at key ' .. key .. ': it holds a value sluice did not write')
end

-- The (time, cost) pairs of a sliding log's raw state, oldest first.
local function pairs_of(raw)
  local log, pos = {}, 18
  while pos < #raw do
    local t, c
    t, c, pos = unpack('<i8i8', raw, pos)
    log[#log + 1] = {t, c}
  end
  return log
end

-- The fields as the stored string: kind, a, b, c, rate, period; a log's:
-- kind, rate, period, then its pairs.
local function encode(fields)
  if fields[1] ~= 6 then
    return pack('<Bi8i8i8i8i8', fields[1], fields[2], fields[3], fields[4], fields[5], fields[6])
  end
  local s = {pack('<Bi8i8', 6, fields[2], fields[3])}
  for i = 4, #fields - 1, 2 do
    s[#s + 1] = pack('<i8i8', fields[i], fields[i + 1])
  end
  return table.concat(s)
end

-- Stores key's fields (a list of integers) with a TTL that ends when the
-- state is equivalent to fresh (fresh_at), plus the margin. Without fields
-- (a query, a refused composite), only a key found without a TTL gets one.
local function store(key, fields, fresh_at)
  local ttl = cdiv(max(fresh_at - now, 0) + margin, 1000)
  if fields then
    if fresh_at <= now then
      call('DEL', key)
      return
    end
    call('SET', key, encode(fields), 'PX', ttl)
  elseif call('PTTL', key) == -1 then
    call('PEXPIRE', key, max(ttl, 1))
  end
end

-- A decision as the script replies it: allowed (0/1), remaining, retry_after
-- (µs, -1 for never), reset_after (µs), delay (µs), window (the end of a
-- fixed or aligned window's window, in µs; 0 elsewhere: see algo.Decision).
local function decision(allowed, remaining, retry, reset, delay, window)
  if retry == huge then
    retry = -1
  end
  return {allowed and 1 or 0, remaining, retry, reset, delay, window or 0}
end
