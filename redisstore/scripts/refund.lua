-- refund.lua: gives units back to one key (token-bucket, gcra, fixed-window,
-- aligned-window), the mirror of internal/algo/refund.go. A key in debt
-- pays it first. Under a bucket the state, whichever limit wrote it, is
-- read as the bucket reads it (bucket_level) and the units come off its
-- level, at least to 0; under a window they come off the debt, then the
-- count, of the window the key is in, never below 0, and only when that
-- window is the one named (refundWindow); a window brought to 0 leaves the
-- key fresh. The script replies what a query sees afterwards. A fresh key
-- stays fresh. The script holds the two window steps (fixed_window.lua,
-- aligned_window.lua) and bucket.lua.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, debt allowance, units, now (µs,
--          -1 for the server's TIME), TTL margin (µs), window (the end of
--          the window the units were spent in, µs; 0 for the one the key
--          is in)
-- reply    the decision a query sees afterwards
now = clock(tonumber(ARGV[7]))
margin = tonumber(ARGV[8])
local kind, rate, period, burst, debt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local units = max(tonumber(ARGV[6]), 0)
local k, a, b, c, r, p, raw = load(KEYS[1])

if kind == 4 or kind == 7 then
  local t, fields = now, nil
  if k then
    -- The window as the step reads it, less the units: off its debt
    -- first, then off its count (refundWindow).
    local n, o, e, kk
    if kind == 4 then
      n, o, e, t = fixed_open(rate, period, debt, k, a, b, c, r, p, raw)
    else
      n, o, kk, t = aligned_open(rate, period, debt, k, a, b, c, r, p, raw)
      e = (kk + 1) * period
    end
    local window = tonumber(ARGV[9])
    if n + o > 0 and (window == 0 or window == e) then
      local paid = min(units, o)
      n, o = max(0, n - (units - paid)), o - paid
      if n + o == 0 then
        call('DEL', KEYS[1])
        k = nil
      elseif kind == 4 then
        fields = {4, n, e, o, rate, period}
      else
        fields = {7, kk, n, o, rate, period}
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
  local d, _, fresh_at = steps[kind](rate, period, burst, debt, 0, 0, k, a, b, c, r, p, raw)
  now = real
  if fields then
    store(KEYS[1], fields, fresh_at)
  end
  return d
end

local ls, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst + debt)
local fields
if k then
  ls = max(0, ls - min(units, burst + debt) * period)
  if kind == 1 then
    fields = {1, ls, t, 0, rate, period}
  else
    local q = fdiv(ls, rate)
    fields = {2, t + q, ls - q * rate, t, rate, period}
  end
end
local remaining, reset = bucket_figures(rate, period, burst, burst * period - ls)
store(KEYS[1], fields, t + reset)
return decision(true, remaining, 0, reset, 0)
