-- refunds.lua: the mirrors of Refund in algo/step.go for token-bucket and
-- gcra, after their steps; only the refund script carries them (Lua builds
-- every function a script defines on every call).

-- The mirror of Refund for token-bucket: the fields after giving units back.
refunds[1] = function(key, rate, period, burst, units)
  if not load(key, 1) then
    return nil
  end
  local full = burst * period
  local xs, l = bucket_at(key, now, rate, period, full)
  return {1, min(full, xs + units * period), l, 0, period}
end

-- The mirror of Refund for gcra: the fields after giving units back.
refunds[2] = function(key, rate, period, burst, units)
  if not load(key, 2) then
    return nil
  end
  local t, _, _, bs = gcra_at(key, rate, burst * period)
  bs = max(0, bs - units * period)
  local q = fdiv(bs, rate)
  return {2, t + q, bs - q * rate, t, rate}
end
