-- multi.lua: several single decisions in one script, made in order, each as
-- single.lua makes it; the batcher sends one for the decisions that wait
-- together (on a cluster, for those whose keys share a slot), which spares
-- the server the per-script cost of each. Every decision is still atomic,
-- and two on the same key see each other in order. The limits are sent once
-- each and named by their position, so the server reads two arguments per
-- decision (three with the caller's time), not seven.
-- KEYS     one key per decision
-- ARGV     TTL margin (µs); L, the number of limits; 1 when each decision
--          carries its time, else 0 (all at the server's TIME); then L
--          limits: kind, rate, period (µs), burst, max delay (µs, -1 for
--          none); then per decision: its limit's position (1..L), cost and,
--          when timed, now (µs, -1 for the server's TIME, read once for the
--          script)
-- reply    one decision per key (see decision in the prelude), flattened
margin = tonumber(ARGV[1])
local nl = tonumber(ARGV[2])
local per = ARGV[3] == '1' and 3 or 2
-- limits by the argument that names them: a table lookup, not a tonumber.
local limits = {}
for j = 1, nl do
  local a = 3 + (j - 1) * 5
  local max_delay = tonumber(ARGV[a + 5])
  if max_delay < 0 then
    max_delay = huge
  end
  limits[tostring(j)] = {steps[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), max_delay}
end
local server
local reply, n = {}, 0
for i = 1, #KEYS do
  local a = 3 + nl * 5 + (i - 1) * per
  local l = limits[ARGV[a + 1]]
  now = per == 3 and tonumber(ARGV[a + 3]) or -1
  if now < 0 then
    server = server or clock(-1)
    now = server
  end
  local d, fields, fresh_at = l[1](KEYS[i], l[2], l[3], l[4], tonumber(ARGV[a + 2]), l[5])
  store(KEYS[i], fields, fresh_at)
  reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4], reply[n + 5] = d[1], d[2], d[3], d[4], d[5]
  n = n + 5
end
return reply
