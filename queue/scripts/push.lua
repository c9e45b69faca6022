-- push.lua: schedules a job at the next free slot, or refuses it.
-- ARGV[6]  the payload
-- reply    {1, id, slot} or {0, retry_after (µs)}
setup()
local s = load()
local slot, retry = take(s, false)
if not slot then
  return {0, retry}
end
local id
repeat
  s.seq = s.seq + 1
  id = int(now) .. '-' .. int(s.seq)
until redis.call('HSETNX', KEYS[3], id, ARGV[6]) == 1
redis.call('ZADD', KEYS[1], int(slot), id)
save(s)
return {1, id, slot}
