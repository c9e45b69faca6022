-- token-bucket: the mirror of tokenBucket in algo/step.go. Fields: tokens
-- scaled by the period (a), last update (b), the period they were scaled by.
local full = burst * period
local xs, l = full, now
local f = load(1)
if f then
  xs, l = f[2], f[3]
  if f[5] ~= period then
    xs = fdiv(xs, f[5]) * period
  end
  xs = math.min(xs, full)
  if now > l then
    -- now−l ≥ ⌈need/rate⌉ is (now−l)·rate ≥ need without the product, which
    -- may pass 2^53.
    if now - l >= cdiv(full - xs, rate) then
      xs = full
    else
      xs = xs + (now - l) * rate
    end
    l = now
  end
end
now = math.max(now, l)
local allowed, retry = false, 0
if cost * period <= xs then
  allowed = true
  xs = xs - cost * period
else
  retry = cdiv(cost * period - xs, rate)
end
local remaining = fdiv(xs, period)
local reset = cdiv(full - xs, rate)
store(cost > 0 and {1, xs, l, 0, period} or nil, now + reset)
return reply(allowed, remaining, retry, reset, 0)
