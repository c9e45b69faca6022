-- class.lua: one step for a class that must leave headroom units to higher
-- classes, the twin of internal/algo/reserve.go (StepReserving), on a state
-- already loaded (the seven values load returns): it passes only if cost +
-- headroom units would pass, and then spends only cost; refused, it returns
-- that request's refusal and no fields to write (the fresh time of the
-- state as it is). Remaining is the class's (class_remaining). A headroom
-- of 0 is the step itself. headroom.lua and the composites step through it.

-- What a class leaving headroom units may still spend of remaining: less
-- the headroom, at least 0; a debt (remaining < 0) is the key's, whatever
-- the class (classRemaining).
local function class_remaining(remaining, headroom)
  if remaining < 0 then
    return remaining
  end
  return max(0, remaining - headroom)
end

local function class_step(step, rate, period, burst, debt, cost, bound, headroom, k, a, b, c, r, p, raw)
  if headroom > 0 and cost > 0 then
    local probe, _, f = step(rate, period, burst, debt, cost + headroom, bound, k, a, b, c, r, p, raw)
    if probe[1] ~= 1 then
      probe[2] = class_remaining(probe[2], headroom)
      return probe, nil, f
    end
  end
  local d, fields, fresh_at = step(rate, period, burst, debt, cost, bound, k, a, b, c, r, p, raw)
  d[2] = class_remaining(d[2], headroom)
  return d, fields, fresh_at
end
