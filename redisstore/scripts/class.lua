-- class.lua: one step for a class that must leave reserve units for higher
-- classes, the twin of internal/algo/reserve.go (StepReserving), on a state already
-- loaded (the seven values load returns): it passes only if cost + reserve
-- units would pass, and then spends only cost; refused, it returns that
-- request's refusal and no fields to write (the fresh time of the state as
-- it is). Remaining is the class's: less the reserve, at least 0. A reserve
-- of 0 is the step itself. reserve.lua and the composites step through it.
local function class_step(step, rate, period, burst, cost, bound, reserve, k, a, b, c, r, p, raw)
  if reserve > 0 and cost > 0 then
    local probe, _, f = step(rate, period, burst, cost + reserve, bound, k, a, b, c, r, p, raw)
    if probe[1] ~= 1 then
      probe[2] = max(0, probe[2] - reserve)
      return probe, nil, f
    end
  end
  local d, fields, fresh_at = step(rate, period, burst, cost, bound, k, a, b, c, r, p, raw)
  d[2] = max(0, d[2] - reserve)
  return d, fields, fresh_at
end
