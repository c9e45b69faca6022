-- composite.lua: requests under several limits, each limit on its own key; a
-- request passes only if every limit grants, and a refusal spends nothing
-- anywhere. The batcher merges the requests that wait together (on a
-- cluster, those in one slot) into one call, made in order, each atomic.
-- A request whose step raises on any of its parts (see guard.lua) writes
-- nothing and replies failed(code) for every part; the others go on.
-- KEYS     per request, one key per limit; all in one cluster slot
-- ARGV     TTL margin (µs), the number of requests, then per request: now
--          (µs, -1 for the server's TIME, read once for the script), its
--          number of limits, then per limit: kind, rate, period (µs), burst,
--          debt allowance, cost, max delay (µs, -1 for none), headroom
--          (units the part leaves to higher classes: class.lua)
-- reply    per request, one decision per limit (see decision in the
--          prelude), flattened; in a refused request, a part that granted
--          reports a look (cost 0) at its key, since nothing was spent, and
--          a refusing part its refusal (whose figures are a look's): each
--          part's own figures at the decision's instant, which
--          sluice.Limiter.TakeEach reports part by part

-- The steps of one request's n parts, from key k + 1 and argument a + 1:
-- their decisions, the fields to write and the times they are fresh, and
-- whether all grant. When one refuses, a part that granted is looked at
-- instead (cost 0): nothing will be spent. It writes nothing.
local function steps_of(n, k, a)
  local ds, writes, fresh, lims, st = {}, {}, {}, {}, {}
  local all = true
  for i = 1, n do
    local l = {steps[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), delay_bound(tonumber(ARGV[a + 7])), tonumber(ARGV[a + 8])}
    lims[i] = l
    -- Each part's state, loaded once, kept flat in st (7 values a part):
    -- a refused request looks at it again below.
    local j = 7 * (i - 1)
    st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7] = load(KEYS[k + i])
    ds[i], writes[i], fresh[i] = class_step(l[1], l[2], l[3], l[4], l[5], tonumber(ARGV[a + 6]), l[6], l[7], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7])
    all = all and ds[i][1] == 1
    a = a + 8
  end
  if not all then
    for i = 1, n do
      if ds[i][1] == 1 then
        local l, j = lims[i], 7 * (i - 1)
        local look, _, f = class_step(l[1], l[2], l[3], l[4], l[5], 0, l[6], l[7], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7])
        ds[i], fresh[i] = look, f
      end
    end
  end
  return ds, writes, fresh, all
end

-- The writes of one request: every part's fields when all grant, else only
-- the TTL repair. A write that raised after another of the request had been
-- made would leave that one: Redis refuses a script's writes for memory
-- only before its first write, and SET, DEL, PTTL and PEXPIRE take a key of
-- any type, so no failure this guards against comes there.
local function stores_of(n, k, writes, fresh, all)
  for i = 1, n do
    if all then
      store(KEYS[k + i], writes[i], fresh[i])
    else
      store(KEYS[k + i], nil, fresh[i])
    end
  end
end

margin = tonumber(ARGV[1])
local reply, r = {}, 0
local a, k = 2, 0 -- the arguments and keys read so far
for _ = 1, tonumber(ARGV[2]) do
  local code = guarded_clock(tonumber(ARGV[a + 1]))
  local n = tonumber(ARGV[a + 2])
  a = a + 2
  local ds, writes, fresh, all
  if not code then
    local ok
    ok, ds, writes, fresh, all = pcall(steps_of, n, k, a)
    if not ok then
      code = failure_code(ds, false)
    else
      local stored, e = pcall(stores_of, n, k, writes, fresh, all)
      if not stored then
        code = failure_code(e, false)
      end
    end
  end
  a = a + 8 * n
  for i = 1, n do
    local d = code and failed(code) or ds[i]
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] = d[1], d[2], d[3], d[4], d[5], d[6]
    r = r + 6
  end
  k = k + n
end
return reply
