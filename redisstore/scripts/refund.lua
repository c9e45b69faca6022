-- refund.lua: gives units back to one key (token-bucket, gcra, fixed-window,
-- aligned-window), the mirror of internal/algo/refund.go. Under a bucket the state,
-- whichever limit wrote it, is read as the bucket reads it (bucket_level)
-- and the units come off its level; under a window they come off the count
-- of the window the key is in, never below 0, and only when that window is
-- the one named (refundWindow); a count brought to 0 leaves the key fresh.
-- The script replies what a query sees afterwards. A fresh key stays fresh.
-- The script holds the two window steps (fixed_window.lua, aligned_window.lua).
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, units, now (µs, -1 for the
--          server's TIME), TTL margin (µs), window (the end of the window
--          the units were spent in, µs; 0 for the one the key is in)
-- reply    the decision a query sees afterwards
now = clock(tonumber(ARGV[6]))
margin = tonumber(ARGV[7])
local kind, rate, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

if kind == 4 or kind == 7 then
  local k, a, b, c, r, p, raw = load(KEYS[1])
  local t, fields = now, nil
  if k then
    -- The window as a request of one unit reads it (the step, which stores
    -- nothing here), less the units (refundWindow).
    local units, window = max(tonumber(ARGV[5]), 0), tonumber(ARGV[8])
    local d, f = steps[kind](rate, period, burst, 1, 0, k, a, b, c, r, p, raw)
    t = d[6] - d[4]
    local held = (kind == 4 and f[2] or f[3]) - d[1] -- f: kind, count, end; or kind, index, count
    if held > 0 and (window == 0 or window == d[6]) then
      if held <= units then
        call('DEL', KEYS[1])
        k = nil
      elseif kind == 4 then
        fields = {4, held - units, f[3], 0, rate, period}
      else
        fields = {7, f[2], held - units, 0, rate, period}
      end
    end
  end
  if fields then
    k, a, b, c, r, p, raw = fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], nil
  end
  -- The query afterwards, at the time the state was read (algo.Refund's
  -- Step); the key's TTL still counts from the call's time.
  local real = now
  now = t
  local d, _, fresh_at = steps[kind](rate, period, burst, 0, 0, k, a, b, c, r, p, raw)
  now = real
  if fields then
    store(KEYS[1], fields, fresh_at)
  end
  return d
end

local units = min(max(tonumber(ARGV[5]), 0), burst)
local k, a, b, c, r, p, raw = load(KEYS[1])
local ls, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst)
local fields
if k then
  ls = max(0, ls - units * period)
  if kind == 1 then
    fields = {1, ls, t, 0, rate, period}
  else
    local q = fdiv(ls, rate)
    fields = {2, t + q, ls - q * rate, t, rate, period}
  end
end
local reset = cdiv(ls, rate)
store(KEYS[1], fields, t + reset)
return decision(true, fdiv(burst * period - ls, period), 0, reset, 0)
