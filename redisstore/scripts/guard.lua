-- guard.lua: a decision's error is its own. The mains (single.lua, multi.lua,
-- composite.lua) run each decision, its step and its write, under pcall; a
-- decision that raises (GET on a key of another type: WRONGTYPE; a value
-- load does not recognise: "sluice: foreign data"; a write refused for
-- memory: OOM; a command the ACL user may not run) writes nothing and
-- replies failed(code) in place of its decision, and the decisions around it
-- go on. A step writes nothing before store, and store writes once (SET, or
-- DEL, or PEXPIRE), so a decision that raises has changed nothing.

-- The codes of a failed decision, read by redisstore (failure in store.go).
local FOREIGN_TYPE, FOREIGN_DATA, NO_MEMORY, NO_PERMISSION, NO_TIME, NOT_WRITABLE, OTHER = 1, 2, 3, 4, 5, 6, 7

-- The code for error e, raised by redis.call (a string, or a table with err,
-- depending on the server's version) or by error(). in_clock: e was raised
-- reading the server's TIME.
local function failure_code(e, in_clock)
  if type(e) == 'table' then
    e = e.err
  end
  e = tostring(e)
  if string.find(e, 'sluice: foreign data', 1, true) then
    return FOREIGN_DATA
  elseif string.find(e, '^WRONGTYPE') then
    return FOREIGN_TYPE
  elseif string.find(e, '^OOM') then
    return NO_MEMORY
  elseif string.find(e, '^NOPERM') or string.find(e, "can't run this command", 1, true) or string.find(e, 'no permissions', 1, true) then
    if in_clock then
      return NO_TIME
    end
    return NO_PERMISSION
  elseif string.find(e, '^READONLY') or string.find(e, '^MISCONF') or string.find(e, '^LOADING') or string.find(e, '^MASTERDOWN') then
    return NOT_WRITABLE
  end
  return OTHER
end

-- The reply of a failed decision: allowed -1, then its code.
local function failed(code)
  return {-1, code, 0, 0, 0, 0}
end

-- Sets now to clock(t) under pcall: nil, or the failure's code when reading
-- TIME raised.
local function guarded_clock(t)
  local ok, v = pcall(clock, t)
  if not ok then
    return failure_code(v, true)
  end
  now = v
end

-- One decision, load, step then write: what guarded runs under pcall.
local function step_and_store(step, key, rate, period, burst, debt, cost, bound)
  local d, fields, fresh_at = step(rate, period, burst, debt, cost, bound, load(key))
  store(key, fields, fresh_at)
  return d
end

-- One decision at now: its reply, or failed(code) when it raised.
local function guarded(step, key, rate, period, burst, debt, cost, bound)
  local ok, d = pcall(step_and_store, step, key, rate, period, burst, debt, cost, bound)
  if not ok then
    return failed(failure_code(d, false))
  end
  return d
end
