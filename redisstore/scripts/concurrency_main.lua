-- concurrency_main.lua: one hold operation on one key (concurrency.lua's
-- hold_step), its load, step and writes under pcall as guard.lua's
-- decisions are.
-- KEYS[1]  the key (the store's prefix, "hold:", the caller's key)
-- ARGV     op (1 acquire, 2 release, 3 extend), limit, lifetime (µs),
--          units, hold id, now (µs, -1 for the server's TIME), TTL margin
--          (µs)
-- reply    allowed (0/1), remaining, retry_after (µs), reset_after (µs),
--          expiry (µs, 0 unless an acquire or extend was allowed), 0; or
--          failed(code) (see guard.lua); or -2 first when an acquire names
--          a hold id still held
local code = guarded_clock(tonumber(ARGV[6]))
if code then
  return failed(code)
end
margin = tonumber(ARGV[7])

local function run(key, limit, lifetime, op, units, id)
  local st = load_holds(key)
  local d, writes = hold_step(st, limit, lifetime, op, units, id)
  if not d then
    return {-2, 0, 0, 0, 0, 0}
  end
  if writes then
    store_holds(st, writes)
  end
  return d
end

local ok, d = pcall(run, KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5]))
if not ok then
  return failed(failure_code(d, false))
end
return d
