-- gcra: the mirror of internal/algo/gcra.go. Fields: TAT = a + b/rate µs (past
-- now + burst·T in debt), the latest time the key was seen (a clock that
-- went back is read then); then the rate and period.

-- The TAT as (whole µs, remainder over rate), its backlog scaled by rate
-- (at most (burst + debt)·period), and the time it is read at (gcraLevel).
local function gcra_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  if k == 2 and r == rate and p == period then
    local t = max(now, c)
    local tu, tr, bs = backlog(a, b, t, rate, (burst + debt) * period)
    return tu, tr, bs, t
  end
  local bs, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst + debt)
  local q = fdiv(bs, rate)
  return t + q, bs - q * rate, bs, t
end

steps[2] = function(rate, period, burst, debt, cost, _, k, a, b, c, r, p, raw)
  local full = burst * period
  local tu, tr, bs, t = gcra_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  local allowed, retry = false, 0
  if cost == 0 or bs + cost * period <= full then -- a query passes, even in debt
    allowed = true
    tu, tr = add_time(tu, tr, cost * period, rate)
    bs = bs + cost * period
  else
    retry = cdiv(bs + cost * period - full, rate)
  end
  local remaining, reset = bucket_figures(rate, period, burst, full - bs)
  local d = decision(allowed, remaining, retry, reset, 0)
  return d, cost > 0 and {2, tu, tr, t, rate, period} or nil, t + reset
end

-- A charge of units > 0 moves the TAT on by units·T, at most to
-- now + (burst + debt)·T (gcraCharge).
charges[2] = function(rate, period, burst, debt, units, k, a, b, c, r, p, raw)
  local _, _, bs, t = gcra_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  local allowed
  bs, allowed = charge_level(period, burst, debt, bs, units)
  local q = fdiv(bs, rate)
  local remaining, reset = bucket_figures(rate, period, burst, burst * period - bs)
  return decision(allowed, remaining, 0, reset, 0), {2, t + q, bs - q * rate, t, rate, period}, t + reset
end
