-- helpers.lua: what every sluice script starts with, the store's and the
-- queue's (internal/redisrun.LuaHelpers).
--
-- Lua numbers are doubles: every quantity stays below 2^53 (algo's
-- Params.Validate bounds them), where doubles hold integers exactly.
-- Division is the one operation that rounds, so it goes through fdiv.

-- The library functions the scripts call, as locals: a global is a table
-- lookup on every use.
local floor, max, min, huge = math.floor, math.max, math.min, math.huge
local call, pack, unpack = redis.call, struct.pack, struct.unpack

-- A time: the caller's, or the server's TIME when negative, read once per
-- script (a script is atomic: its decisions share that instant).
local server_time
local function clock(t)
  if t >= 0 then
    return t
  end
  if not server_time then
    local s = call('TIME')
    server_time = tonumber(s[1]) * 1000000 + tonumber(s[2])
  end
  return server_time
end

-- ⌊a/b⌋ for |a| and 0 < b below 2^53: the double quotient, corrected by
-- one. A negative a floors toward −∞ (a debt's remaining: −⌈−a/b⌉). (Go's
-- integer division needs no correction: here a / b is a double.)
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ⌈a/b⌉ for 0 ≤ a, 0 < b (algo's ceilDiv).
local function cdiv(a, b)
  return fdiv(a + b - 1, b)
end
