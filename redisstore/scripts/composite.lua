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
--          prelude), flattened; in a refused request, a part that granted
--          reports a look (cost 0) at its key, since nothing was spent
margin = tonumber(ARGV[1])
local reply, r = {}, 0
local a, k = 2, 0 -- the arguments and keys read so far
for _ = 1, tonumber(ARGV[2]) do
  now = clock(tonumber(ARGV[a + 1]))
  local n = tonumber(ARGV[a + 2])
  a = a + 2
  local ds, writes, fresh, lims = {}, {}, {}, {}
  local all = true
  for i = 1, n do
    local l = {steps[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), delay_bound(tonumber(ARGV[a + 6]))}
    lims[i] = l
    ds[i], writes[i], fresh[i] = l[1](KEYS[k + i], l[2], l[3], l[4], tonumber(ARGV[a + 5]), l[5])
    all = all and ds[i][1] == 1
    a = a + 6
  end
  for i = 1, n do
    if all then
      store(KEYS[k + i], writes[i], fresh[i])
    else
      -- Nothing is spent: a part that granted reports a look (cost 0) at
      -- its key, as it is.
      if ds[i][1] == 1 then
        local l = lims[i]
        local look, _, f = l[1](KEYS[k + i], l[2], l[3], l[4], 0, l[5])
        ds[i], fresh[i] = look, f
      end
      store(KEYS[k + i], nil, fresh[i])
    end
    local d = ds[i]
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = d[1], d[2], d[3], d[4], d[5]
    r = r + 5
  end
  k = k + n
end
return reply
