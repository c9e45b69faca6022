-- window.lua: what fixed-window and aligned-window share, the mirror of
-- internal/algo/window.go; loaded only with their steps (carry, which
-- every script's held needs, is in convert.lua). A window counts c units
-- and, once full, owes o more, at most the debt allowance (SEMANTICS.md,
-- "Charges and debt"): when it ends, the next window counts what was owed,
-- up to its rate, and owes the rest.

-- A window read under rate and debt made whole: units owed fill a rate
-- raised above the count first, and no more than debt stay owed
-- (fillWindow).
local function fill_window(rate, debt, c, o)
  if o > 0 and c < rate then
    local m = min(o, rate - c)
    c, o = c + m, o - m
  end
  return c, min(o, debt)
end

-- Counts units in a window holding c and owing o: up to the rate, then as
-- a debt up to the allowance; and whether they all counted (chargeCount).
local function charge_count(rate, debt, c, o, units)
  local fill = min(units, max(0, rate - c))
  local owe = min(units - fill, debt - o)
  return c + fill, o + owe, fill + owe == units
end

-- The wait at t until cost units pass in the window ending at e that owes
-- o, or in one after it (retryWindow).
local function retry_window(rate, period, o, e, t, cost)
  return e + cdiv(max(0, o + cost - rate), rate) * period - t
end

-- The figures at t of a window counting c and owing o that ends at e:
-- remaining, negative in debt, and reset_after, until every window the
-- debt reaches has ended (windowFigures).
local function window_figures(rate, period, c, o, e, t)
  local reset = 0
  if c > 0 then
    reset = e + cdiv(o, rate) * period - t
  end
  return max(0, rate - c) - o, reset
end

-- A take of cost units at t in a window counting c and owing o that ends
-- at e (what fixedWindow and alignedWindow share once the window is
-- read): its decision, the count after it and reset_after. A query passes,
-- even over a lowered rate or in debt.
local function window_take(rate, period, c, o, e, t, cost)
  local allowed, retry = false, 0
  if cost == 0 or c + cost <= rate then
    allowed, c = true, c + cost
  else
    retry = retry_window(rate, period, o, e, t, cost)
  end
  local remaining, reset = window_figures(rate, period, c, o, e, t)
  return decision(allowed, remaining, retry, reset, 0, e), c, reset
end
