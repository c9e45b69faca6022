-- charge.lua: charges units to one key, or to every part of a composite,
-- never refused (SEMANTICS.md, "Charges and debt"; algo.Charge, the
-- prelude's charge): each part's units are spent past what its key has,
-- leaving it in debt up to the part's debt allowance, the rest forgiven.
-- Units 0 is a query (the step of cost 0). The charges of single keys that
-- wait together go in multi.lua instead, with the takes. A composite's
-- parts are charged together, atomically;
-- when one raises (see guard.lua) nothing is written and every part
-- replies failed(code). The script holds the steps of the algorithms its
-- parts name (token-bucket, gcra, fixed-window, aligned-window).
-- KEYS     one key per part; all in one cluster slot
-- ARGV     now (µs, -1 for the server's TIME), TTL margin (µs), then per
--          part: kind, rate, period (µs), burst, debt allowance, units (at
--          most capacity + debt allowance + 1: the units past those are
--          forgiven as they would be)
-- reply    one decision per part (see decision in the prelude), flattened:
--          what a query sees afterwards, allowed 1 when every unit was
--          charged

-- Every part charged; the writes come after all the steps, so that a part
-- that raises leaves every key as it was. (A write that raised after
-- another had been made would leave that one: Redis refuses a script's
-- writes for memory only before its first write, and SET and DEL take a
-- key of any type.)
local function charge_all()
  local ds, writes, fresh = {}, {}, {}
  for i = 1, #KEYS do
    local a = 2 + 6 * (i - 1)
    local kind, rate, period, burst, debt, units = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
    ds[i], writes[i], fresh[i] = charge(kind, rate, period, burst, debt, units, load(KEYS[i]))
  end
  for i = 1, #KEYS do
    store(KEYS[i], writes[i], fresh[i])
  end
  return ds
end

local code = guarded_clock(tonumber(ARGV[1]))
margin = tonumber(ARGV[2])
local ds
if not code then
  local ok
  ok, ds = pcall(charge_all)
  if not ok then
    code = failure_code(ds, false)
  end
end
local reply = {}
for i = 1, #KEYS do
  local d = code and failed(code) or ds[i]
  for v = 1, 6 do
    reply[#reply + 1] = d[v]
  end
end
return reply
