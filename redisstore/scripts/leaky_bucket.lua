-- leaky-bucket: the mirror of internal/algo/leaky_bucket.go. Fields: the time the
-- queue is empty again, D = a + b/rate µs, the latest time the key was seen
-- (a clock that went back is read then); then the rate and period.
steps[3] = function(rate, period, burst, _, cost, max_delay, k, a, b, c, r, p, raw)
  local qs = burst * period
  local t, du, dr, bs
  if k == 3 and r == rate and p == period then
    t = max(now, c)
    du, dr, bs = backlog(a, b, t, rate, qs + period)
  else
    bs, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst + 1)
    local q = fdiv(bs, rate)
    du, dr = t + q, bs - q * rate
  end
  local allowed, retry, wait = false, 0, 0
  local delay = cdiv(bs, rate)
  local last = bs + (cost - 1) * period
  if cost == 0 or (last <= qs and delay <= max_delay) then
    allowed = true
    wait = delay
    du, dr = add_time(du, dr, cost * period, rate)
    bs = bs + cost * period
  elseif delay > max_delay then
    retry = huge
  else
    retry = cdiv(last - qs, rate)
  end
  local reset = cdiv(bs, rate)
  local d = decision(allowed, fdiv(max(0, qs + period - bs), period), retry, reset, wait)
  return d, cost > 0 and {3, du, dr, t, rate, period} or nil, t + reset
end
