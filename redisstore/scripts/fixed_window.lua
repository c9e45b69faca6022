-- fixed-window: the mirror of fixedWindow in algo/step.go. Fields: the count
-- and the window's end.
steps[4] = function(key, rate, period, burst, cost)
  local t = now
  local c, e = 0, 0
  local a, b = load(key, 4)
  if a then
    c, e = a, b
    t = max(t, e - period)
  end
  if t >= e then
    if cost == 0 then -- a query opens no window
      return decision(true, rate, 0, 0, 0), nil, t
    end
    c, e = 0, t + period
  end
  local allowed, retry = false, 0
  if c + cost <= rate then
    allowed = true
    c = c + cost
  else
    retry = e - t
  end
  local d = decision(allowed, max(0, rate - c), retry, e - t, 0)
  return d, cost > 0 and {4, c, e, 0, 0} or nil, e
end
