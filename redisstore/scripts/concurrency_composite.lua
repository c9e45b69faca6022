-- concurrency_composite.lua: a hold (concurrency.lua) and rate parts
-- (each algorithm's step) decided as one, the twin of memstore's holdAll:
-- the hold is held and every part spends only if all grant; a refusal
-- holds nothing and spends nothing. It mirrors composite.lua's steps for
-- one request, with the hold as one more part whose look is a query.
-- KEYS     the hold key, then one key per part; all in one cluster slot
-- ARGV     TTL margin (µs), now (µs, -1 for the server's TIME), the hold's
--          limit, lifetime (µs), units and id, the number of parts, then
--          per part: kind, rate, period (µs), burst, debt allowance, cost,
--          max delay (µs, -1 for none), headroom (class.lua)
-- reply    the hold's decision (as concurrency_main.lua's), then one
--          decision per part (see decision in the prelude), flattened; in a
--          refusal, a part that granted reports a look, and the hold, if
--          it would have granted, a query; failed(code) for every one when
--          a step raised; -2 first when the hold id is held

local function run(n)
  local limit, lifetime, units, id = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  local held = load_holds(KEYS[1])
  local ld, hwrites = hold_step(held, limit, lifetime, 1, units, id)
  if not ld then
    return nil
  end
  local ds, writes, fresh, lims, st = {}, {}, {}, {}, {}
  local all, a = ld[1] == 1, 7
  for i = 1, n do
    local l = {steps[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), delay_bound(tonumber(ARGV[a + 7])), tonumber(ARGV[a + 8])}
    lims[i] = l
    local j = 7 * (i - 1)
    st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7] = load(KEYS[1 + i])
    ds[i], writes[i], fresh[i] = class_step(l[1], l[2], l[3], l[4], l[5], tonumber(ARGV[a + 6]), l[6], l[7], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7])
    all = all and ds[i][1] == 1
    a = a + 8
  end
  if all then
    for i = 1, n do
      store(KEYS[1 + i], writes[i], fresh[i])
    end
    if hwrites then
      store_holds(held, hwrites)
    end
    return ld, ds
  end
  for i = 1, n do
    if ds[i][1] == 1 then
      local l, j = lims[i], 7 * (i - 1)
      local look, _, f = class_step(l[1], l[2], l[3], l[4], l[5], 0, l[6], l[7], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7])
      ds[i], fresh[i] = look, f
    end
    store(KEYS[1 + i], nil, fresh[i])
  end
  if ld[1] == 1 then
    ld = hold_step(held, limit, lifetime, 1, 0, id) -- a query: it would have granted
  end
  return ld, ds
end

local n = tonumber(ARGV[7])
local code = guarded_clock(tonumber(ARGV[2]))
margin = tonumber(ARGV[1])
local ld, ds
if not code then
  local ok
  ok, ld, ds = pcall(run, n)
  if not ok then
    code = failure_code(ld, false)
  elseif not ld then
    return {-2, 0, 0, 0, 0, 0}
  end
end
local reply = {}
for i = 0, n do
  local d = code and failed(code) or (i == 0 and ld or ds[i])
  for v = 1, 6 do
    reply[#reply + 1] = d[v]
  end
end
return reply
