-- fixed-window: the mirror of internal/algo/fixed_window.go. Fields: the count and the
-- window's end; then the rate and period.
steps[4] = function(rate, period, burst, cost, _, k, a, b, fc, r, p, raw)
  local t = now
  local c, e = 0, 0
  if k == 4 then
    c, e = a, b
    local start = e - p
    t = max(t, start)
    if p ~= period and t < e then
      e = start + period
    end
  elseif k then
    -- Another algorithm's units, as if spent now in a window opened now.
    local u
    u, t = held(k, a, b, fc, r, p, raw, t)
    if u > 0 then
      c, e = min(u, rate), t + period
    end
  end
  if t >= e then
    if cost == 0 then -- a query opens no window
      return decision(true, rate, 0, 0, 0), nil, t
    end
    c, e = 0, t + period
  end
  local allowed, retry = false, 0
  if cost == 0 or c + cost <= rate then
    allowed = true
    c = c + cost
  else
    retry = e - t
  end
  local d = decision(allowed, max(0, rate - c), retry, e - t, 0, e)
  return d, cost > 0 and {4, c, e, 0, rate, period} or nil, e
end
