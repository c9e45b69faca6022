-- class.lua: one step for a class that must leave headroom units to higher
-- classes, the twin of internal/algo/reserve.go (StepReserving), on a state
-- already loaded (the seven values load returns): it passes only if cost +
-- headroom units would pass, and then spends only cost; refused, it returns
-- that request's refusal and no fields to write (the fresh time of the
-- state as it is). Remaining is the class's: less the headroom, at least 0.
-- A headroom of 0 is the step itself. headroom.lua and the composites step
-- through it.
local function class_step(step, rate, period, burst, cost, bound, headroom, k, a, b, c, r, p, raw)
  if headroom > 0 and cost > 0 then
    local probe, _, f = step(rate, period, burst, cost + headroom, bound, k, a, b, c, r, p, raw)
    if probe[1] ~= 1 then
      probe[2] = max(0, probe[2] - headroom)
      return probe, nil, f
    end
  end
  local d, fields, fresh_at = step(rate, period, burst, cost, bound, k, a, b, c, r, p, raw)
  d[2] = max(0, d[2] - headroom)
  return d, fields, fresh_at
end
