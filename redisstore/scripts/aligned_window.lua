-- aligned-window: the mirror of internal/algo/aligned_window.go. Fields: the index of
-- the window counted in (windows of period µs since the epoch) and its count;
-- then the rate and period.
steps[7] = function(rate, period, burst, cost, _, k, a, b, fc, r, p, raw)
  local t, w = now, period
  local c = 0
  if k == 7 and p == w then
    t = max(t, a * w)
    if fdiv(t, w) == a then
      c = b
    end
  elseif k then
    local u
    u, t = held(k, a, b, fc, r, p, raw, t)
    c = min(u, rate)
  end
  local kk = fdiv(t, w)
  local e = (kk + 1) * w
  local allowed, retry = false, 0
  if cost == 0 or c + cost <= rate then
    allowed = true
    c = c + cost
  else
    retry = e - t
  end
  local reset = 0
  if c > 0 then
    reset = e - t
  end
  local d = decision(allowed, max(0, rate - c), retry, reset, 0, e)
  return d, cost > 0 and {7, kk, c, 0, rate, period} or nil, t + reset
end
