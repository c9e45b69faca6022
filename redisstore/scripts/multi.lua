-- multi.lua: several single decisions in one script, made in order, each as
-- single.lua makes it; the batcher sends one for the decisions that wait
-- together (on a cluster, for those whose keys share a slot), which spares
-- the server the per-script cost of each. Every decision is still atomic,
-- and two on the same key see each other in order.
-- KEYS     one key per decision
-- ARGV     TTL margin (µs), then per decision: kind, rate, period (µs),
--          burst, cost, max delay (µs, -1 for none), now (µs, -1 for the
--          server's TIME, read once for the script)
-- reply    one decision per key (see decision in the prelude), flattened
margin = tonumber(ARGV[1])
local server
local reply = {}
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 7
  now = tonumber(ARGV[a + 7])
  if now < 0 then
    server = server or clock(-1)
    now = server
  end
  local max_delay = tonumber(ARGV[a + 6])
  if max_delay < 0 then
    max_delay = math.huge
  end
  local d, fields, fresh_at = steps[tonumber(ARGV[a + 1])](KEYS[i], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), max_delay)
  store(KEYS[i], fields, fresh_at)
  for j = 1, 5 do
    reply[#reply + 1] = d[j]
  end
end
return reply
