-- concurrency.lua: a key's holds and one operation on them, the twin of
-- algo/concurrency.go (HoldStep). The holds are a list of {id, units,
-- expiry}, sorted by expiry; a hold is held while now < expiry.

-- A key's holds are stored packed, as a sliding log is: the kind 8 in one
-- byte, then (id, units, expiry) as little-endian 8-byte integers per
-- hold, in the order of their expiries.
local HOLDS = 8

-- The holds at key, oldest expiry first: {} when there is none. A value
-- of another layout is an error, never read as no holds.
local function load_holds(key)
  local raw = call('GET', key)
  local held = {}
  if not raw then
    return held
  end
  local n = #raw
  if n < 1 or (n - 1) % 24 ~= 0 or string.byte(raw, 1) ~= HOLDS then
    error('sluice: foreign data at key ' .. key .. ': it holds a value sluice did not write')
  end
  local pos = 2
  while pos < n do
    local id, units, expiry
    id, units, expiry, pos = unpack('<i8i8i8', raw, pos)
    held[#held + 1] = {id, units, expiry}
  end
  return held
end

-- Stores held at key with a TTL that ends when the last hold comes back
-- (fresh_at), plus the margin; no hold left deletes the key.
local function store_holds(key, held, fresh_at)
  if #held == 0 then
    call('DEL', key)
    return
  end
  local s = {string.char(HOLDS)}
  for i = 1, #held do
    s[#s + 1] = pack('<i8i8i8', held[i][1], held[i][2], held[i][3])
  end
  call('SET', key, table.concat(s), 'PX', cdiv(max(fresh_at - now, 0) + margin, 1000))
end

-- insert_hold puts l into held after the holds that expire with it.
local function insert_hold(held, l)
  local i = #held + 1
  while i > 1 and held[i - 1][3] > l[3] do
    i = i - 1
  end
  table.insert(held, i, l)
end

-- One operation at now (1 acquire, 2 release, 3 extend) of the hold id,
-- under limit and lifetime: the reply (allowed, remaining, retry_after,
-- reset_after, expiry, 0), the holds to store (nil: nothing changed) and
-- the time the last one comes back. An acquire that names a hold still
-- held replies nil: algo.ErrHoldID.
local function hold_step(limit, lifetime, op, units, id, held)
  local live, changed = {}, false
  for i = 1, #held do
    if held[i][3] > now then
      live[#live + 1] = held[i]
    else
      changed = true
    end
  end
  local at, used = nil, 0
  for i = 1, #live do
    if not at and live[i][1] == id then
      at = i
    end
    used = used + live[i][2]
  end
  local allowed, retry, expiry = false, 0, 0
  if op == 1 then
    if at and units > 0 then
      return nil
    end
    if units == 0 then
      allowed = true
    elseif used + units <= limit then
      allowed, changed, expiry = true, true, now + lifetime
      insert_hold(live, {id, units, expiry})
      used = used + units
    else
      local left = used
      for i = 1, #live do
        left = left - live[i][2]
        if left + units <= limit then
          retry = live[i][3] - now
          break
        end
      end
    end
  elseif at then
    allowed, changed = true, true
    local l = table.remove(live, at)
    if op == 3 then
      expiry = now + lifetime
      insert_hold(live, {l[1], l[2], expiry})
    else
      used = used - l[2]
    end
  end
  local reset = 0
  if #live > 0 then
    reset = live[#live][3] - now
  end
  if not changed then
    live = nil
  end
  return {allowed and 1 or 0, max(0, limit - used), retry, reset, expiry, 0}, live, now + reset
end
