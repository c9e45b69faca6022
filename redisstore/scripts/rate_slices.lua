-- rate_slices.lua: leases one holder (a replica of sluice serve --rlqs)
-- its slices of shared rates (Store.ClaimRates). Each key is a hash, one
-- field per holder: "tokens demand weight end" (end in µs). The slices of
-- the other holders that have not ended add up to what this one may not
-- take: it gets min(want, max(its own, rate - theirs)), so the slices add
-- up to at most the rate at every instant; a holder asks at least what
-- its grants still hold, so it keeps that. Ended slices are deleted.
-- KEYS     the rates' hashes
-- ARGV     holder, now (µs, -1 for the server's TIME), life (µs), then
--          for each key: rate, want, demand, weight
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

local out = {}
for i, key in ipairs(KEYS) do
  local a = 3 + (i - 1) * 4
  local rate, want = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local demand, weight = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local all = redis.call('HGETALL', key)
  local mine, others = 0, 0
  local ds, ws = { demand }, { weight }
  for j = 1, #all, 2 do
    local t, d, w, e = string.match(all[j + 1], '^(%d+) (%d+) (%d+) (%d+)$')
    t, d, w, e = tonumber(t), tonumber(d), tonumber(w), tonumber(e)
    if not e or e <= now then
      redis.call('HDEL', key, all[j])
    elseif all[j] == me then
      mine = t
    else
      others = others + t
      ds[#ds + 1], ws[#ws + 1] = d, w
    end
  end
  local tokens = math.max(0, math.min(want, math.max(mine, rate - others)))
  redis.call('HSET', key, me, string.format('%d %d %d %d', tokens, demand, weight, now + life))
  if redis.call('PTTL', key) < keep then
    redis.call('PEXPIRE', key, keep)
  end
  out[#out + 1] = tokens
  out[#out + 1] = fair(rate, ds, ws)
end
out[#out + 1] = now
return out
