-- bucket.lua: what token-bucket and gcra share, the mirror of
-- bucketFigures and chargeLevel in internal/algo/token_bucket.go; loaded
-- only with their steps. A level past burst·period is a debt (SEMANTICS.md,
-- "Charges and debt"): the tokens are negative.

-- The figures of a bucket holding xs = (burst − level)·period: remaining,
-- ⌊xs/period⌋ (negative in debt: fdiv floors), and reset_after.
local function bucket_figures(rate, period, burst, xs)
  return fdiv(xs, period), cdiv(burst * period - xs, rate)
end

-- Adds units to the scaled level ls, up to (burst + debt)·period; returns
-- it and whether they all fit. Units past burst + debt + 1 never fit:
-- counting them would only leave the exact range.
local function charge_level(period, burst, debt, ls, units)
  local top = (burst + debt) * period
  local u = min(units, burst + debt + 1)
  if u * period <= top - ls then
    return ls + u * period, true
  end
  return top, false
end
