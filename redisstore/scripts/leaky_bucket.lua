-- leaky-bucket: the mirror of leakyBucket in algo/step.go. Fields: the time the
-- queue is empty again, D = a + b/rate µs, the latest time the key was seen
-- (a clock that went back is read then), and the rate b is counted in.
steps[3] = function(key, rate, period, burst, cost, max_delay)
  local qs = burst * period
  local t = now
  local a, b, seen, scale = load(key, 3)
  if a then
    t = max(now, seen)
  end
  local du, dr = t, 0
  if a then
    du, dr = rescale_time(a, b, scale, rate)
  end
  local bs
  du, dr, bs = backlog(du, dr, t, rate, qs + period)
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
  return d, cost > 0 and {3, du, dr, t, rate} or nil, t + reset
end
