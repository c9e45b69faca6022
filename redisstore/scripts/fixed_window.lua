-- fixed-window: the mirror of fixedWindow in algo/step.go. Fields: the count
-- and the window's end.
local c, e = 0, 0
local f = load(4)
if f then
  c, e = f[2], f[3]
  now = math.max(now, e - period)
end
if now >= e then
  if cost == 0 then
    return reply(true, rate, 0, 0, 0)
  end
  c, e = 0, now + period
end
local allowed, retry = false, 0
if c + cost <= rate then
  allowed = true
  c = c + cost
else
  retry = e - now
end
store(cost > 0 and {4, c, e, 0, 0} or nil, e)
return reply(allowed, math.max(0, rate - c), retry, e - now, 0)
