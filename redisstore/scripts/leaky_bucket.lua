-- leaky-bucket: the mirror of leakyBucket in algo/step.go. Fields: the time the
-- queue is empty again, D = a + b/rate µs, and the rate b is counted in.
local qs = burst * period
local du, dr = now, 0
local f = load(3)
if f then
  du, dr = rescale_time(f, rate)
end
local bs
du, dr, bs = backlog(du, dr, rate, qs + period)
local allowed, retry, wait = false, 0, 0
local delay = cdiv(bs, rate)
local last = bs + (cost - 1) * period
if cost == 0 or (last <= qs and delay <= max_delay) then
  allowed = true
  wait = delay
  du, dr = add_time(du, dr, cost * period, rate)
  bs = bs + cost * period
elseif delay > max_delay then
  retry = math.huge
else
  retry = cdiv(last - qs, rate)
end
local remaining = math.max(0, fdiv(math.max(0, qs + period - bs), period))
local reset = cdiv(bs, rate)
store(cost > 0 and {3, du, dr, 0, rate} or nil, now + reset)
return reply(allowed, remaining, retry, reset, wait)
