-- concurrency.lua: a key's holds and one operation on them, the twin of
-- internal/algo/concurrency.go (HoldStep); a hold is held while now < its expiry.
--
-- A key's holds are a sorted set, so that no operation reads them all:
-- each hold a member, its id in decimal, scored by its expiry (µs, at
-- least 1); a hold of more than one unit a second member, "u" and its id,
-- scored by minus its units; and the member HELD, scored by minus the
-- units of every hold in the set (those come back that no operation has
-- dropped yet included), so that no figure is a sum over the holds. Every
-- member but the holds scores below 0: the holds are the scores above 0,
-- in the order they come back (among equal expiries, of their ids, which
-- changes no figure). A hold of one unit, the usual one, is one member.
-- Every command is O(log n) in the members, but for the drop of the
-- holds come back (each once; none read when every hold has come back)
-- and a refusal's walk (bounded by the units it asks for; one lookup by
-- rank when every hold is of one unit).

local HELD = 'sluice:held'

-- x in decimal, whole, for a member's name or a range's bound: Lua joins
-- a number to a string with 14 significant digits, and an expiry has 16.
local function int(x)
  return string.format('%d', x)
end

-- The state at key: the key and the units of its holds (0: no holds). A
-- key of another type (a string: another program's value, a rate limit's
-- state, or the holds of an earlier sluice, which kept them in one
-- string) fails with WRONGTYPE, and a sorted set without HELD is foreign
-- data: neither is read as no holds.
local function load_holds(key)
  local t = call('ZSCORE', key, HELD)
  if t then
    return {key = key, total = -tonumber(t)}
  end
  if call('EXISTS', key) == 1 then
    error('sluice: foreign data at key ' .. key .. ': a sorted set sluice did not write')
  end
  return {key = key, total = 0}
end

-- Whether some hold of key holds more than one unit: HELD is then not
-- the only member scoring below 0.
local function any_heavy(key)
  return call('ZCOUNT', key, '-inf', '(0') > 1
end

-- The units of the hold sid.
local function units_of(key, sid)
  local u = call('ZSCORE', key, 'u' .. sid)
  if u then
    return -tonumber(u)
  end
  return 1
end

-- The holds of st come back at now (x ≤ now): the units they held, and in
-- w (the writes to make) that they are to be dropped: all of them, so
-- that the holds left are those held, as in HoldStep. When none is held
-- any more, the set is to go whole (w.reset: UNLINK frees it away from
-- the script) and nothing is read hold by hold; when every hold is of one
-- unit, their units are their number (ZCOUNT) and they go by one range
-- (ZREMRANGEBYSCORE); else each is read for its units. Dropping costs
-- Redis about a µs a hold, each dropped once.
local function expired(st, w)
  local key = st.key
  local n = call('ZCOUNT', key, '(0', int(now))
  if n == 0 then
    return 0
  end
  if call('ZCOUNT', key, '(' .. int(now), '+inf') == 0 then
    w.reset = true
    return st.total
  end
  w.drop = true
  if not any_heavy(key) then
    return n
  end
  local units, gone = 0, {}
  for _, sid in ipairs(call('ZRANGEBYSCORE', key, '(0', int(now))) do
    local u = units_of(key, sid)
    if u > 1 then
      gone[#gone + 1] = 'u' .. sid
    end
    units = units + u
  end
  w.gone = gone
  return units
end

-- The expiry of the first hold held at now by whose return left − limit
-- units have come back, walking the holds by rank in the order they come
-- back (the first held is after every member scoring at most now). Its
-- cost grows with the holds walked, so with the units asked for beyond
-- those free; when every hold is of one unit, it is one lookup by rank.
local function free_at(key, left, limit)
  local rank = call('ZCOUNT', key, '-inf', int(now))
  if not any_heavy(key) then
    local r = call('ZRANGE', key, rank + left - limit - 1, rank + left - limit - 1, 'WITHSCORES')
    return tonumber(r[2])
  end
  while true do
    local r = call('ZRANGE', key, rank, rank + 63, 'WITHSCORES')
    if #r == 0 then
      error('sluice: the holds at key ' .. key .. ' add up to less than HELD says')
    end
    for i = 1, #r, 2 do
      left = left - units_of(key, r[i])
      if left <= limit then
        return tonumber(r[i + 1])
      end
    end
    rank = rank + 64
  end
end

-- The expiry of the last hold held after the operation: the last held
-- now, or the one before it if the operation took away or moved the hold
-- sid (gone), or expiry if later; 0 when none is held.
local function last_expiry(key, sid, gone, expiry)
  local r = call('ZREVRANGEBYSCORE', key, '+inf', '(' .. int(now), 'WITHSCORES', 'LIMIT', 0, 2)
  local last = 0
  if r[1] and not (gone and r[1] == sid) then
    last = tonumber(r[2])
  elseif r[3] then
    last = tonumber(r[4])
  end
  return max(last, expiry)
end

-- One operation at now (1 acquire, 2 release, 3 extend) of the hold id,
-- under limit and lifetime, on the state st (load_holds): the reply
-- (allowed, remaining, retry_after, reset_after, expiry, 0) and the
-- writes to make (store_holds; nil: none). Nothing is written here, so
-- that a composite can decide before it writes. An acquire that names a
-- hold still held replies nil: algo.ErrHoldID.
local function hold_step(st, limit, lifetime, op, units, id)
  local key, sid, w = st.key, int(id), {}
  local used, x = st.total, false
  if used > 0 then
    used = used - expired(st, w)
    x = used > 0 and call('ZSCORE', key, sid)
  end
  local at = x and tonumber(x) > now
  local allowed, retry, expiry = false, 0, 0
  if op == 1 then
    if at and units > 0 then
      return nil
    end
    if units == 0 then
      allowed = true
    elseif used + units <= limit then
      allowed, expiry = true, now + lifetime
      w.add, w.units, used = sid, units, used + units
    else
      retry = free_at(key, used + units, limit) - now
    end
  elseif at then
    allowed = true
    if op == 3 then
      expiry = now + lifetime
      w.add = sid
    else
      w.remove, used = sid, used - units_of(key, sid)
    end
  end
  local last, reset = expiry, 0 -- the last hold's expiry, if any is held
  if used > 0 and not w.reset then
    last = last_expiry(key, sid, w.add or w.remove, expiry)
  end
  if last > 0 then
    reset = last - now
  end
  w.used, w.expiry, w.last = used, expiry, last
  if not (w.drop or w.reset or w.add or w.remove) then
    w = nil
  end
  return {allowed and 1 or 0, max(0, limit - used), retry, reset, expiry, 0}, w
end

-- Makes the writes w of hold_step on st, and gives the key a TTL that
-- ends when its last hold comes back, plus the margin; no hold held
-- unlinks the key. HELD is written first: out of memory, Redis refuses a
-- script's first write if it may add memory (ZADD), and lets every later
-- one pass (a script cannot stop half-way), so a hold operation is
-- refused whole, as a rate decision is, never made while Redis refuses
-- writes.
local function store_holds(st, w)
  local key = st.key
  if w.used == 0 then
    call('UNLINK', key)
    return
  end
  if w.reset then -- every hold came back: the set goes, and a new one is written
    call('ZADD', key, 'XX', int(-st.total), HELD) -- changes nothing: the write refused out of memory
    call('UNLINK', key)
  end
  call('ZADD', key, int(-w.used), HELD)
  if w.drop then
    call('ZREMRANGEBYSCORE', key, '(0', int(now))
    for _, u in ipairs(w.gone or {}) do
      call('ZREM', key, u)
    end
  end
  if w.remove then
    call('ZREM', key, w.remove, 'u' .. w.remove)
  end
  if w.add then
    call('ZADD', key, int(w.expiry), w.add)
    if w.units and w.units > 1 then
      call('ZADD', key, int(-w.units), 'u' .. w.add)
    end
  end
  call('PEXPIRE', key, cdiv(max(w.last - now, 0) + margin, 1000))
end
