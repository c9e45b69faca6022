-- multi.lua: several single decisions of one algorithm in one script, made in
-- order, each as single.lua makes it (a take) or charge.lua (a charge of one
-- key); the batcher sends one for the decisions that wait together (on a
-- cluster, for those whose keys share a slot), which spares the server the
-- per-script cost of each. Every decision is still
-- atomic, and two on the same key see each other in order. Each distinct
-- limit is sent once, and a decision carries only what differs: under load
-- (one limit, one cost, the server's time) nothing but its key.
-- KEYS     one key per decision
-- ARGV     TTL margin (µs); L, the number of limits; the cost of every
--          decision, or -1 when each carries its own; 1 when each decision
--          carries its time, else 0 (all at the server's TIME); then L
--          limits: kind, rate, period (µs), burst, debt allowance, max delay
--          (µs, -1 for none), charge (1: the decisions under it are charges
--          of their cost, the prelude's charge; else 0); then per decision,
--          in this order, only: its limit's position (1..L) when L > 1, its
--          cost when the cost is -1, and its time when timed (µs, -1 for the
--          server's TIME, read once for the script)
-- reply    one decision per key (see decision in the prelude), or
--          failed(code) for a decision that raised (see guard.lua), flattened
margin = tonumber(ARGV[1])
local nl, shared, timed = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
-- A charge under kind as a step is called (its cost the units).
local function charge_step(kind)
  return function(rate, period, burst, debt, units, _, ...)
    return charge(kind, rate, period, burst, debt, units, ...)
  end
end

-- limits by the argument that names them: a table lookup, not a tonumber.
local limits = {}
for j = 1, nl do
  local a = 4 + (j - 1) * 7
  local kind, step = tonumber(ARGV[a + 1]), nil
  if ARGV[a + 7] == '1' then
    step = charge_step(kind)
  else
    step = steps[kind]
  end
  limits[tostring(j)] = {step, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), delay_bound(tonumber(ARGV[a + 6]))}
end
local per = (nl > 1 and 1 or 0) + (shared < 0 and 1 or 0) + (timed and 1 or 0)
local a = 4 + nl * 7
local no_time -- the failure's code when reading TIME raised
if not timed then
  no_time = guarded_clock(-1)
end
local reply, n = {}, 0
for i = 1, #KEYS do
  local l, cost = limits['1'], shared
  local b = a
  if nl > 1 then
    b = b + 1
    l = limits[ARGV[b]]
  end
  if shared < 0 then
    b = b + 1
    cost = tonumber(ARGV[b])
  end
  local d
  local code = no_time
  if timed then
    code = guarded_clock(tonumber(ARGV[b + 1]))
  end
  if code then
    d = failed(code)
  else
    d = guarded(l[1], KEYS[i], l[2], l[3], l[4], l[5], cost, l[6])
  end
  reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4], reply[n + 5], reply[n + 6] = d[1], d[2], d[3], d[4], d[5], d[6]
  n = n + 6
  a = a + per
end
return reply
