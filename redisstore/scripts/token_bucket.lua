-- token-bucket: the mirror of tokenBucket in algo/step.go. Fields: tokens
-- scaled by the period (a), last update (b), the period they were scaled by.
-- Like every step it returns the decision, the fields to store (nil: store
-- nothing) and the time the state is equivalent to fresh.

-- The tokens refilled to t and the time of that update (bucketAt).
local function bucket_at(key, t, rate, period, full)
  local xs, l, _, scale = load(key, 1)
  if not xs then
    return full, t
  end
  if scale ~= period then
    xs = fdiv(xs, scale) * period
  end
  xs = min(xs, full)
  if t > l then
    -- t−l ≥ ⌈need/rate⌉ is (t−l)·rate ≥ need without the product, which
    -- may pass 2^53.
    if t - l >= cdiv(full - xs, rate) then
      xs = full
    else
      xs = xs + (t - l) * rate
    end
    l = t
  end
  return xs, l
end

steps[1] = function(key, rate, period, burst, cost)
  local full = burst * period
  local xs, l = bucket_at(key, now, rate, period, full)
  local t = max(now, l)
  local allowed, retry = false, 0
  if cost * period <= xs then
    allowed = true
    xs = xs - cost * period
  else
    retry = cdiv(cost * period - xs, rate)
  end
  local reset = cdiv(full - xs, rate)
  local d = decision(allowed, fdiv(xs, period), retry, reset, 0)
  return d, cost > 0 and {1, xs, l, 0, period} or nil, t + reset
end

