-- token-bucket: the mirror of internal/algo/token_bucket.go. Fields: the level (units
-- spent and not yet refilled) scaled by the period (a, at most (burst +
-- debt)·period: past burst·period the key is in debt), the last update (b);
-- then the rate and period. Like every step it returns the decision, the
-- fields to store (nil: store nothing) and the time the state is equivalent
-- to fresh; charges[1] likewise, for a charge.

-- The scaled level at now, at most (burst + debt)·period, and the time it
-- is read at (tokenLevel).
local function token_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  if k == 1 and r == rate and p == period then
    -- drain: refill over t − l without the product, which may pass 2^53.
    local t = max(now, b)
    if t - b >= cdiv(a, rate) then
      return 0, t
    end
    return min(a - (t - b) * rate, (burst + debt) * period), t
  end
  return bucket_level(k, a, b, c, r, p, raw, now, period, burst + debt)
end

steps[1] = function(rate, period, burst, debt, cost, _, k, a, b, c, r, p, raw)
  local full = burst * period
  local ls, t = token_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  local xs = full - ls
  local allowed, retry = false, 0
  if cost == 0 or cost * period <= xs then -- a query passes, even in debt
    allowed = true
    xs = xs - cost * period
  else
    retry = cdiv(cost * period - xs, rate)
  end
  local remaining, reset = bucket_figures(rate, period, burst, xs)
  local d = decision(allowed, remaining, retry, reset, 0)
  return d, cost > 0 and {1, full - xs, t, 0, rate, period} or nil, t + reset
end

-- A charge of units > 0 adds them to the level, at most burst + debt past
-- full (tokenBucketCharge).
charges[1] = function(rate, period, burst, debt, units, k, a, b, c, r, p, raw)
  local ls, t = token_level(rate, period, burst, debt, k, a, b, c, r, p, raw)
  local allowed
  ls, allowed = charge_level(period, burst, debt, ls, units)
  local remaining, reset = bucket_figures(rate, period, burst, burst * period - ls)
  return decision(allowed, remaining, 0, reset, 0), {1, ls, t, 0, rate, period}, t + reset
end
