-- sliding-window: the mirror of internal/algo/sliding_window.go. Fields: the current
-- window's index, the previous and current counts; then the rate and the
-- window length.
steps[5] = function(rate, period, burst, _, cost, _, k, a, b, c, r, p, raw)
  local t, w = now, period
  local kk = fdiv(t, w)
  local prev, cur = 0, 0
  if k == 5 and p == w then
    if kk < a then -- the clock went back across a window: read at its start
      kk, t = a, a * w
    end
    if kk - a == 0 then
      prev, cur = b, c
    elseif kk - a == 1 then
      prev = c
    end
  elseif k then
    local u
    u, t = held(k, a, b, c, r, p, raw, t)
    kk, cur = fdiv(t, w), min(u, rate)
  end
  local x = t - kk * w
  local es = prev * (w - x) + cur * w
  local allowed, retry = false, 0
  if cost == 0 or es + cost * w <= rate * w then
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
    reset = (kk + 2) * w - t
  elseif prev > 0 then
    reset = (kk + 1) * w - t
  end
  local d = decision(allowed, fdiv(max(0, rate * w - es), w), retry, reset, 0)
  return d, cost > 0 and {5, kk, prev, cur, rate, w} or nil, t + reset
end
