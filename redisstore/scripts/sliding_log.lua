-- sliding-log: the mirror of internal/algo/sliding_log.go. Fields: the rate and
-- period, then the admitted requests of the trailing period as time, cost
-- pairs, oldest first; requests in the same µs share a pair.
steps[6] = function(rate, period, burst, _, cost, _, k, a, b, c, r, p, raw)
  local t = now
  local log = {}
  local w = period
  if k == 6 then
    log = pairs_of(raw)
    w = min(w, p) -- entries that had left the writer's period stay gone
  elseif k then
    local u
    u, t = held(k, a, b, c, r, p, raw, t)
    if u > 0 then
      log = {{t, min(u, rate)}}
    end
  end
  if #log > 0 then
    t = max(t, log[#log][1])
  end
  local live = {}
  for _, e in ipairs(log) do
    if e[1] > t - w then
      live[#live + 1] = e
    end
  end
  local used = 0
  for _, e in ipairs(live) do
    used = used + e[2]
  end
  local allowed, retry = false, 0
  if cost == 0 or used + cost <= rate then
    allowed = true
    used = used + cost
  else
    local left = used
    for _, e in ipairs(live) do
      left = left - e[2]
      if left + cost <= rate then
        retry = e[1] + period - t
        break
      end
    end
  end
  local newest = -1
  if #live > 0 then
    newest = live[#live][1]
  end
  if allowed and cost > 0 then
    newest = t
  end
  local reset = 0
  if newest >= 0 then
    reset = newest + period - t
  end
  local d = decision(allowed, max(0, rate - used), retry, reset, 0)
  if cost == 0 then
    return d, nil, t + reset
  end
  if allowed then
    if #live > 0 and live[#live][1] == t then
      live[#live][2] = live[#live][2] + cost
    else
      live[#live + 1] = {t, cost}
    end
  end
  local fields = {6, rate, period}
  for _, e in ipairs(live) do
    fields[#fields + 1] = e[1]
    fields[#fields + 1] = e[2]
  end
  return d, fields, t + reset
end
