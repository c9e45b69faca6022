-- gcra: the mirror of internal/algo/gcra.go. Fields: TAT = a + b/rate µs, the latest
-- time the key was seen (a clock that went back is read then); then the rate
-- and period.
steps[2] = function(rate, period, burst, cost, _, k, a, b, c, r, p, raw)
  local full = burst * period
  local t, tu, tr, bs
  if k == 2 and r == rate and p == period then
    t = max(now, c)
    tu, tr, bs = backlog(a, b, t, rate, full)
  else
    bs, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst)
    local q = fdiv(bs, rate)
    tu, tr = t + q, bs - q * rate
  end
  local allowed, retry = false, 0
  if bs + cost * period <= full then
    allowed = true
    tu, tr = add_time(tu, tr, cost * period, rate)
    bs = bs + cost * period
  else
    retry = cdiv(bs + cost * period - full, rate)
  end
  local reset = cdiv(bs, rate)
  local d = decision(allowed, fdiv(full - bs, period), retry, reset, 0)
  return d, cost > 0 and {2, tu, tr, t, rate, period} or nil, t + reset
end
