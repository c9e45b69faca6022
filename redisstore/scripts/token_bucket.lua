-- token-bucket: the mirror of internal/algo/token_bucket.go. Fields: the level (units
-- spent and not yet refilled) scaled by the period (a), the last update (b);
-- then the rate and period. Like every step it returns the decision, the
-- fields to store (nil: store nothing) and the time the state is equivalent
-- to fresh.
steps[1] = function(rate, period, burst, cost, _, k, a, b, c, r, p, raw)
  local full = burst * period
  local ls, t
  if k == 1 and r == rate and p == period then
    -- drain: refill over t − l without the product, which may pass 2^53.
    t = max(now, b)
    local e = t - b
    if e >= cdiv(a, rate) then
      ls = 0
    else
      ls = min(a - e * rate, full)
    end
  else
    ls, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst)
  end
  local xs = full - ls
  local allowed, retry = false, 0
  if cost * period <= xs then
    allowed = true
    xs = xs - cost * period
  else
    retry = cdiv(cost * period - xs, rate)
  end
  local reset = cdiv(full - xs, rate)
  local d = decision(allowed, fdiv(xs, period), retry, reset, 0)
  return d, cost > 0 and {1, full - xs, t, 0, rate, period} or nil, t + reset
end
