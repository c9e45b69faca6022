-- composite.lua: one request under several limits, each on its own key; it
-- passes only if every limit grants, and a refusal spends nothing anywhere.
-- KEYS     one key per limit, all in one cluster slot
-- ARGV     now (µs, -1 for the server's TIME), TTL margin (µs), then per
--          limit: kind, rate, period (µs), burst, cost, max delay (µs, -1)
-- reply    one decision per limit (see decision in the prelude), flattened
now = clock(tonumber(ARGV[1]))
margin = tonumber(ARGV[2])
local n = #KEYS
local ds, writes, fresh = {}, {}, {}
local all = true
for i = 1, n do
  local a = 2 + (i - 1) * 6
  local max_delay = tonumber(ARGV[a + 6])
  if max_delay < 0 then
    max_delay = huge
  end
  ds[i], writes[i], fresh[i] = steps[tonumber(ARGV[a + 1])](KEYS[i], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), max_delay)
  all = all and ds[i][1] == 1
end
local reply = {}
for i = 1, n do
  if all then
    store(KEYS[i], writes[i], fresh[i])
  else
    store(KEYS[i], nil, fresh[i])
  end
  for j = 1, 5 do
    reply[#reply + 1] = ds[i][j]
  end
end
return reply
