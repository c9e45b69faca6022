-- sliding-log: the mirror of slidingLog in algo/step.go. Fields: the admitted
-- requests of the trailing period as time, cost pairs, oldest first; requests
-- in the same µs share a pair.
local log = {}
local f = load(6)
if f then
  for i = 2, #f - 1, 2 do
    log[#log + 1] = {f[i], f[i + 1]}
  end
end
if #log > 0 then
  now = math.max(now, log[#log][1])
end
local kept = {}
for _, e in ipairs(log) do
  if e[1] > now - period then
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
    if #log > 0 and log[#log][1] == now then
      log[#log][2] = log[#log][2] + cost
    else
      log[#log + 1] = {now, cost}
    end
    used = used + cost
  end
else
  local left = used
  for _, e in ipairs(log) do
    left = left - e[2]
    if left + cost <= rate then
      retry = e[1] + period - now
      break
    end
  end
end
local reset = 0
if #log > 0 then
  reset = log[#log][1] + period - now
end
local fields = {6}
for _, e in ipairs(log) do
  fields[#fields + 1] = e[1]
  fields[#fields + 1] = e[2]
end
-- A query may have pruned the log: it is stored too, as the Go step keeps it.
store((cost > 0 or f) and fields or nil, now + reset)
return reply(allowed, math.max(0, rate - used), retry, reset, 0)
