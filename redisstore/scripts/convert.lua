-- convert.lua: the mirror of internal/algo/convert.go, in every script. A state
-- another limit wrote (another rate, period, burst or algorithm) is read under
-- that limit at the moment of the call, then carried into the caller's terms
-- (SEMANTICS.md, "Changed limits"): spent units are never forgotten. The
-- state comes as load returns it: kind k, fields a, b, c, the rate r and
-- period p that wrote it, and the raw string (a log's pairs).

-- The count and debt of the j-th window (j ≥ 1) after one that owed o
-- under rate: 0, 0 once the debt is paid (carry, internal/algo/window.go).
local function carry(o, j, rate)
  if j > cdiv(o, rate) then
    return 0, 0
  end
  o = o - (j - 1) * rate
  local c = min(o, rate)
  return c, o - c
end

-- The fixed window (count c, debt o, end e) of rate units per period at t:
-- itself while open, else the window its debt carries into (0, 0, 0 when
-- it owed too little to reach t) (rollFixed, internal/algo/fixed_window.go).
local function roll_fixed(c, o, e, t, rate, period)
  if t < e then
    return c, o, e
  end
  local j = fdiv(t - e, period) + 1
  c, o = carry(o, j, rate)
  if c == 0 then
    return 0, 0, 0
  end
  return c, o, e + j * period
end

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

-- The whole units the state holds at t under its own limit (a bucket's
-- level rounded up, its debt included; a window's count and debt), and the
-- time it was read at (held).
local function held(k, a, b, c, r, p, raw, t)
  if k <= 3 then
    local ls
    ls, t = own_level(k, a, b, c, r, t)
    return cdiv(ls, p), t
  elseif k == 4 then
    -- A window's count and what it owes, its debt carried through the
    -- windows that have ended.
    t = max(t, b - p)
    local n, o = roll_fixed(a, c, b, t, r, p)
    return n + o, t
  elseif k == 7 then
    t = max(t, a * p)
    local n, o = b, c
    local j = fdiv(t, p) - a
    if j > 0 then
      n, o = carry(o, j, r)
    end
    return n + o, t
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

-- The level a bucket algorithm of period `period` reads from the state at
-- t, scaled by period, at most cap_units·period (its capacity and debt
-- allowance), and the time it was read at (bucketLevel). k is nil for a
-- fresh key.
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
