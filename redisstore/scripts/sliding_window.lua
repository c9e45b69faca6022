-- sliding-window: the mirror of slidingWindow in algo/step.go. Fields: the
-- current window's index, the previous and current counts, the window length.
steps[5] = function(key, rate, period, burst, cost)
  local t, w = now, period
  local k = fdiv(t, w)
  local prev, cur = 0, 0
  local fk, fp, fc, fw = load(key, 5)
  if fk and fw == w then
    if k < fk then -- the clock went back across a window: read at its start
      k, t = fk, fk * w
    end
    if k - fk == 0 then
      prev, cur = fp, fc
    elseif k - fk == 1 then
      prev = fc
    end
  end
  local x = t - k * w
  local es = prev * (w - x) + cur * w
  local allowed, retry = false, 0
  if es + cost * w <= rate * w then
    allowed = true
    cur = cur + cost
    es = es + cost * w
  else
    -- slidingRetry: in this window, else in the next.
    retry = nil
    if prev > 0 then
      local xa = cdiv((prev + cur + cost - rate) * w, prev)
      if xa < w then
        retry = xa - x
      end
    end
    if not retry then
      local x2 = 0
      local need = (cur + cost - rate) * w
      if need > 0 then
        x2 = cdiv(need, cur)
      end
      retry = w - x + x2
    end
  end
  local reset = 0
  if cur > 0 then
    reset = (k + 2) * w - t
  elseif prev > 0 then
    reset = (k + 1) * w - t
  end
  local d = decision(allowed, fdiv(max(0, rate * w - es), w), retry, reset, 0)
  return d, cost > 0 and {5, k, prev, cur, w} or nil, t + reset
end
