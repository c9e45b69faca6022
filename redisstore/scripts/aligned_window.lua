-- aligned-window: the mirror of internal/algo/aligned_window.go. Fields: the index of
-- the window counted in (windows of period µs since the epoch), its count
-- and the units it owes past its rate (a debt: window.lua); then the rate
-- and period.

-- The count and debt of the window kk holding now read under the limit,
-- kk, and the time it is read at (alignedOpen). Its own state (same
-- period) is read under the rate that wrote it, its debt carried through
-- the windows that have ended; another's holds units spent now.
local function aligned_open(rate, period, debt, k, a, b, fc, r, p, raw)
  local t, w = now, period
  local c, o = 0, 0
  if k == 7 and p == w then
    t = max(t, a * w)
    c, o = b, fc
    local j = fdiv(t, w) - a
    if j > 0 then
      c, o = carry(o, j, r)
    end
  elseif k then
    o, t = held(k, a, b, fc, r, p, raw, t)
  end
  c, o = fill_window(rate, debt, c, o)
  return c, o, fdiv(t, w), t
end

steps[7] = function(rate, period, burst, debt, cost, _, k, a, b, fc, r, p, raw)
  local c, o, kk, t = aligned_open(rate, period, debt, k, a, b, fc, r, p, raw)
  local d, reset
  d, c, reset = window_take(rate, period, c, o, (kk + 1) * period, t, cost)
  return d, cost > 0 and {7, kk, c, o, rate, period} or nil, t + reset
end

-- A charge of units > 0 counts them in the window of now, past its rate as
-- a debt (alignedWindowCharge).
charges[7] = function(rate, period, burst, debt, units, k, a, b, fc, r, p, raw)
  local c, o, kk, t = aligned_open(rate, period, debt, k, a, b, fc, r, p, raw)
  local allowed
  c, o, allowed = charge_count(rate, debt, c, o, units)
  local remaining, reset = window_figures(rate, period, c, o, (kk + 1) * period, t)
  return decision(allowed, remaining, 0, reset, 0, (kk + 1) * period), {7, kk, c, o, rate, period}, t + reset
end
