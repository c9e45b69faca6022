-- convert.lua: the mirror of internal/algo/convert.go, in every script. A state
-- another limit wrote (another rate, period, burst or algorithm) is read under
-- that limit at the moment of the call, then carried into the caller's terms
-- (SEMANTICS.md, "Changed limits"): spent units are never forgotten. The
-- state comes as load returns it: kind k, fields a, b, c, the rate r and
-- period p that wrote it, and the raw string (a log's pairs).

-- A bucket state's level at t under its own limit, scaled by its period, and
-- the time it was read at (ownLevel).
local function own_level(k, a, b, c, r, t)
  if k == 1 then
    t = max(t, b)
    local e = t - b
    if e >= cdiv(a, r) then
      return 0, t
    end
    return a - e * r, t
  end
  t = max(t, c)
  if a < t or (a == t and b == 0) then
    return 0, t
  end
  return (a - t) * r + b, t
end

-- The whole units the state holds at t under its own limit, and the time
-- it was read at (held).
local function held(k, a, b, c, r, p, raw, t)
  if k <= 3 then
    local ls
    ls, t = own_level(k, a, b, c, r, t)
    return cdiv(ls, p), t
  elseif k == 4 then
    t = max(t, b - p)
    if t < b then
      return a, t
    end
  elseif k == 7 then
    t = max(t, a * p)
    if fdiv(t, p) == a then
      return b, t
    end
  elseif k == 5 then
    t = max(t, a * p)
    local kk = fdiv(t, p)
    local x = t - kk * p
    if kk == a then
      return cdiv(b * (p - x) + c * p, p), t
    elseif kk == a + 1 then
      return cdiv(c * (p - x), p), t
    end
  else
    local log = pairs_of(raw)
    if #log > 0 then
      t = max(t, log[#log][1])
    end
    local u = 0
    for _, e in ipairs(log) do
      if e[1] > t - p then
        u = u + e[2]
      end
    end
    return u, t
  end
  return 0, t
end

-- The level a bucket algorithm of period `period` and capacity cap_units
-- reads from the state at t, scaled by period, and the time it was read at
-- (bucketLevel). k is nil for a fresh key.
local function bucket_level(k, a, b, c, r, p, raw, t, period, cap_units)
  if not k then
    return 0, t
  end
  if k > 3 then
    local u
    u, t = held(k, a, b, c, r, p, raw, t)
    return min(u, cap_units) * period, t
  end
  local ls
  ls, t = own_level(k, a, b, c, r, t)
  if p ~= period then
    return min(cdiv(ls, p), cap_units) * period, t
  end
  return min(ls, cap_units * period), t
end
