-- rate_slices.lua: leases one holder (a replica of sluice serve --rlqs)
-- its slices of shared rates (Store.ClaimRates). Each key is a hash, one
-- field per holder: "tokens demand weight end unit" (end in µs; tokens
-- and demand per unit seconds). The slices of the other holders that have
-- not ended add up to what this one may not take: it gets min(want,
-- max(its own, rate - theirs)), so the slices add up to at most the rate
-- at every instant; a holder asks at least what its grants still hold, so
-- it keeps that. Slices of another unit (a reload changed it) count as
-- the rates they stand for, in the claim's unit: the others' rounded up,
-- the holder's own down, so no rate is under-counted. Ended slices are
-- deleted.
-- KEYS     the rates' hashes
-- ARGV     holder, now (µs, -1 for the server's TIME), life (µs), then
--          for each key: rate, want, demand, weight, unit (seconds, 1 to
--          2^25)
-- reply    for each key: tokens, fair (the holder's weighted max-min
--          share of the rate by every live holder's demand); then now (µs)
local now = tonumber(ARGV[2])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local me, life = ARGV[1], tonumber(ARGV[3])
local keep = math.ceil(life / 1000) + 1000 -- ms: the hash outlives its slices

-- fair is the first holder's share of rate by weighted max-min over the
-- demands ds and weights ws.
local function fair(rate, ds, ws)
  local idx, wsum = {}, 0
  for j = 1, #ds do
    idx[j], wsum = j, wsum + ws[j]
  end
  table.sort(idx, function(x, y)
    local a, b = ds[x] * ws[y], ds[y] * ws[x]
    return a < b or (a == b and x < y)
  end)
  local left = rate
  for _, j in ipairs(idx) do
    if ds[j] * wsum > left * ws[j] then
      -- this one and every one after it want more than a share of
      -- what is left: they split it by weight
      return math.floor(left * ws[1] / wsum)
    end
    if j == 1 then
      return ds[1]
    end
    left, wsum = left - ds[j], wsum - ws[j]
  end
  return ds[1]
end

-- convert is x per from seconds as a whole number per to seconds,
-- rounded up (up) or down, exactly in doubles (x below 2^34, from and to
-- at most 2^25: every product below 2^51), at most 2^40 (past any rate).
local function convert(x, from, to, up)
  if from == to then
    return x
  end
  local q = math.floor(x / from)
  local r = x - q * from
  if r < 0 then
    q, r = q - 1, r + from
  elseif r >= from then
    q, r = q + 1, r - from
  end
  if q * to >= 2 ^ 40 then
    return 2 ^ 40
  end
  local c = math.floor(r * to / from)
  if c * from > r * to then
    c = c - 1
  elseif (c + 1) * from <= r * to then
    c = c + 1
  end
  if up and c * from < r * to then
    c = c + 1
  end
  return math.min(q * to + c, 2 ^ 40)
end

local out = {}
for i, key in ipairs(KEYS) do
  local a = 3 + (i - 1) * 5
  local rate, want = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local demand, weight = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local unit = tonumber(ARGV[a + 5])
  local all = redis.call('HGETALL', key)
  local mine, others = 0, 0
  local ds, ws = { demand }, { weight }
  for j = 1, #all, 2 do
    local t, d, w, e, u = string.match(all[j + 1], '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
    t, d, w, e, u = tonumber(t), tonumber(d), tonumber(w), tonumber(e), tonumber(u)
    if not e or e <= now or u < 1 then
      redis.call('HDEL', key, all[j])
    elseif all[j] == me then
      mine = convert(t, u, unit, false)
    else
      others = others + convert(t, u, unit, true)
      ds[#ds + 1], ws[#ws + 1] = math.min(convert(d, u, unit, false), 2 ^ 40), w
    end
  end
  local tokens = math.max(0, math.min(want, math.max(mine, rate - others)))
  redis.call('HSET', key, me, string.format('%d %d %d %d %d', tokens, demand, weight, now + life, unit))
  if redis.call('PTTL', key) < keep then
    redis.call('PEXPIRE', key, keep)
  end
  out[#out + 1] = tokens
  out[#out + 1] = fair(rate, ds, ws)
end
out[#out + 1] = now
return out
