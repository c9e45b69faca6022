-- prelude.lua: what every algorithm script shares. sluice loads it in front of
-- each algorithm's body, so each script stays one EVALSHA.
--
-- KEYS[1]  the key's state: a string of integers "kind a b c scale" (a sliding
--          log: "kind t1 n1 t2 n2 ..."), always with a TTL
-- ARGV     rate, period (µs), burst, cost, max delay (µs, -1 for none),
--          now (µs, -1 for the server's TIME), TTL margin (µs)
-- reply    {allowed (0/1), remaining, retry_after (µs, -1 for never),
--           reset_after (µs), delay (µs)}
--
-- Lua numbers are doubles: every quantity stays below 2^53 (Params.Validate
-- bounds them), where doubles hold integers exactly. Division is the one
-- operation that rounds, so it goes through fdiv.
local rate = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local max_delay = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local margin = tonumber(ARGV[7])
if max_delay < 0 then
  max_delay = math.huge
end
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- The stored fields of the key when they belong to kind, else nil (fresh).
local function load(kind)
  local raw = redis.call('GET', KEYS[1])
  if not raw then
    return nil
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

-- Stores the fields (a list of integers) with a TTL that ends when the state
-- is equivalent to fresh, plus the margin. Without fields (a query), only a
-- key found without a TTL gets one.
local function store(fields, fresh_at)
  local ttl = cdiv(fresh_at - now + margin, 1000)
  if fields then
    if fresh_at <= now then
      redis.call('DEL', KEYS[1])
      return
    end
    for i = 1, #fields do
      fields[i] = string.format('%d', fields[i])
    end
    redis.call('SET', KEYS[1], table.concat(fields, ' '), 'PX', ttl)
  elseif redis.call('PTTL', KEYS[1]) == -1 then
    redis.call('PEXPIRE', KEYS[1], math.max(ttl, 1))
  end
end

local function reply(allowed, remaining, retry, reset, delay)
  if retry == math.huge then
    retry = -1
  end
  return {allowed and 1 or 0, remaining, retry, reset, delay}
end

-- The timestamp a + b/scale in 1/rate µs: a changed rate rounds it up to the
-- next whole µs (rescaleTime).
local function rescale_time(f, r)
  if f[5] ~= r and f[3] ~= 0 then
    return f[2] + 1, 0
  end
  return f[2], f[3]
end

-- Clamps u + r/rt into [now, now + limit/rt]; returns it and its distance from
-- now scaled by rt (backlog).
local function backlog(u, r, rt, limit)
  if u < now or (u == now and r == 0) then
    return now, 0, 0
  end
  local q = fdiv(limit, rt)
  if u - now > q or (u - now == q and r > limit - q * rt) then
    return now + q, limit - q * rt, limit
  end
  return u, r, (u - now) * rt + r
end

-- Adds n/rt µs to u + r/rt (addTime).
local function add_time(u, r, n, rt)
  r = r + n
  local q = fdiv(r, rt)
  return u + q, r - q * rt
end

