-- sliding-log: the mirror of slidingLog in algo/step.go. Fields: the admitted
-- requests of the trailing period as time, cost pairs, oldest first; requests
-- in the same µs share a pair.

-- The fields of a list state of kind at key: kind, then pairs; nil (fresh)
-- when key holds none.
local function load_pairs(key, kind)
  local raw = call('GET', key)
  if not raw or (#raw - 1) % 16 ~= 0 or string.byte(raw, 1) ~= kind then
    return nil
  end
  local f, n, pos = {kind}, 1, 2
  while pos < #raw do
    f[n + 1], f[n + 2], pos = unpack('<i8i8', raw, pos)
    n = n + 2
  end
  return f
end

steps[6] = function(key, rate, period, burst, cost)
  local t = now
  local log = {}
  local f = load_pairs(key, 6)
  if f then
    for i = 2, #f - 1, 2 do
      log[#log + 1] = {f[i], f[i + 1]}
    end
  end
  if #log > 0 then
    t = max(t, log[#log][1])
  end
  local kept = {}
  for _, e in ipairs(log) do
    if e[1] > t - period then
      kept[#kept + 1] = e
    end
  end
  log = kept
  local used = 0
  for _, e in ipairs(log) do
    used = used + e[2]
  end
  local allowed, retry = false, 0
  if used + cost <= rate then
    allowed = true
    if cost > 0 then
      if #log > 0 and log[#log][1] == t then
        log[#log][2] = log[#log][2] + cost
      else
        log[#log + 1] = {t, cost}
      end
      used = used + cost
    end
  else
    local left = used
    for _, e in ipairs(log) do
      left = left - e[2]
      if left + cost <= rate then
        retry = e[1] + period - t
        break
      end
    end
  end
  local reset = 0
  if #log > 0 then
    reset = log[#log][1] + period - t
  end
  local fields = {6}
  for _, e in ipairs(log) do
    fields[#fields + 1] = e[1]
    fields[#fields + 1] = e[2]
  end
  -- A query may have pruned the log: it is stored too, as the Go step keeps it.
  local d = decision(allowed, max(0, rate - used), retry, reset, 0)
  return d, (cost > 0 or f) and fields or nil, t + reset
end
