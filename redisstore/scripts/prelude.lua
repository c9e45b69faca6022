-- prelude.lua: what every script shares. sluice builds each script from this
-- prelude, the step of one algorithm (or of all, for composites) and a main
-- (single.lua or composite.lua), so each decision stays one EVALSHA.
--
-- A key's state is one string of integers, "kind a b c scale" (a sliding log:
-- "kind t1 n1 t2 n2 ..."), always with a TTL.
--
-- Lua numbers are doubles: every quantity stays below 2^53 (Params.Validate
-- bounds them), where doubles hold integers exactly. Division is the one
-- operation that rounds, so it goes through fdiv.

-- now is the decision's time (µs) and margin the TTL margin (µs); the main
-- sets them. steps[kind] is each algorithm's step, refunds[kind] its refund
-- where it has one.
local now, margin
local steps, refunds = {}, {}

-- The decision's time: the caller's, or the server's TIME when negative.
local function clock(t)
  if t < 0 then
    local s = redis.call('TIME')
    t = tonumber(s[1]) * 1000000 + tonumber(s[2])
  end
  return t
end

-- ⌊a/b⌋ for 0 ≤ a, 0 < b below 2^53: the double quotient, corrected by one.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function cdiv(a, b)
  return fdiv(a + b - 1, b)
end

-- The stored fields of key when they belong to kind, else nil (fresh). The
-- five-field states parse with one match; a sliding log, field by field.
local function load(key, kind)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  local k, a, b, c, scale = string.match(raw, '^(%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
  if k then
    if tonumber(k) ~= kind then
      return nil
    end
    return {kind, tonumber(a), tonumber(b), tonumber(c), tonumber(scale)}
  end
  local f = {}
  for x in string.gmatch(raw, '%-?%d+') do
    f[#f + 1] = tonumber(x)
  end
  if f[1] ~= kind then
    return nil
  end
  return f
end

-- The fields as the stored string: decimal integers.
local function encode(fields)
  if #fields == 5 then
    return string.format('%d %d %d %d %d', fields[1], fields[2], fields[3], fields[4], fields[5])
  end
  local s = {}
  for i = 1, #fields do
    s[i] = string.format('%d', fields[i])
  end
  return table.concat(s, ' ')
end

-- Stores key's fields (a list of integers) with a TTL that ends when the
-- state is equivalent to fresh (fresh_at), plus the margin. Without fields
-- (a query, a refused composite), only a key found without a TTL gets one.
local function store(key, fields, fresh_at)
  local ttl = cdiv(math.max(fresh_at - now, 0) + margin, 1000)
  if fields then
    if fresh_at <= now then
      redis.call('DEL', key)
      return
    end
    redis.call('SET', key, encode(fields), 'PX', ttl)
  elseif redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, math.max(ttl, 1))
  end
end

-- A decision as the script replies it: allowed (0/1), remaining, retry_after
-- (µs, -1 for never), reset_after (µs), delay (µs).
local function decision(allowed, remaining, retry, reset, delay)
  if retry == math.huge then
    retry = -1
  end
  return {allowed and 1 or 0, remaining, retry, reset, delay}
end
