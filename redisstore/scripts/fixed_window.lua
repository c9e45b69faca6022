-- fixed-window: the mirror of internal/algo/fixed_window.go. Fields: the count, the
-- window's end and the units it owes past its rate (a debt: window.lua);
-- then the rate and period.

-- The count, debt and end of the window open at now read under the limit
-- (e 0: none), and the time it is read at (fixedOpen). Its own state is
-- read under the limit that wrote it, its debt carried through the windows
-- that have ended, its end moved by a changed period; another algorithm's
-- units are spent in a window opened now.
local function fixed_open(rate, period, debt, k, a, b, fc, r, p, raw)
  local t = now
  local c, o, e = 0, 0, 0
  if k == 4 then
    t = max(t, b - p)
    c, o, e = roll_fixed(a, fc, b, t, r, p)
    if p ~= period and e ~= 0 then
      c, o, e = roll_fixed(c, o, e - p + period, t, rate, period)
    end
  elseif k then
    o, t = held(k, a, b, fc, r, p, raw, t)
    if o > 0 then
      e = t + period
    end
  end
  c, o = fill_window(rate, debt, c, o)
  return c, o, e, t
end

steps[4] = function(rate, period, burst, debt, cost, _, k, a, b, fc, r, p, raw)
  local c, o, e, t = fixed_open(rate, period, debt, k, a, b, fc, r, p, raw)
  if e == 0 then
    if cost == 0 then -- a query opens no window
      return decision(true, rate, 0, 0, 0), nil, t
    end
    e = t + period
  end
  local d, reset
  d, c, reset = window_take(rate, period, c, o, e, t, cost)
  return d, cost > 0 and {4, c, e, o, rate, period} or nil, t + reset
end

-- A charge of units > 0 counts them in the window open at now, or one it
-- opens, past its rate as a debt (fixedWindowCharge).
charges[4] = function(rate, period, burst, debt, units, k, a, b, fc, r, p, raw)
  local c, o, e, t = fixed_open(rate, period, debt, k, a, b, fc, r, p, raw)
  if e == 0 then
    e = t + period
  end
  local allowed
  c, o, allowed = charge_count(rate, debt, c, o, units)
  local remaining, reset = window_figures(rate, period, c, o, e, t)
  return decision(allowed, remaining, 0, reset, 0, e), {4, c, e, o, rate, period}, t + reset
end
