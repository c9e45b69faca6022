-- timestamp.lua: the exact timestamps gcra and leaky-bucket keep, as whole µs
-- plus a remainder over the rate; loaded only with those steps.

-- Clamps u + r/rt into [t, t + limit/rt]; returns it and its distance from t
-- scaled by rt (backlog).
local function backlog(u, r, t, rt, limit)
  if u < t or (u == t and r == 0) then
    return t, 0, 0
  end
  local q = fdiv(limit, rt)
  if u - t > q or (u - t == q and r > limit - q * rt) then
    return t + q, limit - q * rt, limit
  end
  return u, r, (u - t) * rt + r
end

-- Adds n/rt µs to u + r/rt (addTime).
local function add_time(u, r, n, rt)
  r = r + n
  local q = fdiv(r, rt)
  return u + q, r - q * rt
end
