-- composite.lua: requests under several limits, each limit on its own key; a
-- request passes only if every limit grants, and a refusal spends nothing
-- anywhere. The batcher merges the requests that wait together (on a
-- cluster, those in one slot) into one call, made in order, each atomic.
-- KEYS     per request, one key per limit; all in one cluster slot
-- ARGV     TTL margin (µs), the number of requests, then per request: now
--          (µs, -1 for the server's TIME, read once for the script), its
--          number of limits, then per limit: kind, rate, period (µs), burst,
--          cost, max delay (µs, -1 for none)
-- reply    per request, one decision per limit (see decision in the
--          prelude), flattened
margin = tonumber(ARGV[1])
local reply, r = {}, 0
local a, k = 2, 0 -- the arguments and keys read so far
for _ = 1, tonumber(ARGV[2]) do
  now = clock(tonumber(ARGV[a + 1]))
  local n = tonumber(ARGV[a + 2])
  a = a + 2
  local ds, writes, fresh = {}, {}, {}
  local all = true
  for i = 1, n do
    ds[i], writes[i], fresh[i] = steps[tonumber(ARGV[a + 1])](KEYS[k + i], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), delay_bound(tonumber(ARGV[a + 6])))
    all = all and ds[i][1] == 1
    a = a + 6
  end
  for i = 1, n do
    if all then
      store(KEYS[k + i], writes[i], fresh[i])
    else
      store(KEYS[k + i], nil, fresh[i])
    end
    local d = ds[i]
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = d[1], d[2], d[3], d[4], d[5]
    r = r + 5
  end
  k = k + n
end
return reply
