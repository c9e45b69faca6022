-- pop.lua: one look at the queue (Memory.pop). Jobs whose visibility
-- deadline has passed go back to due, each with a fresh slot (never
-- refused); then the earliest due job is released if its release instant,
-- max(slot, last + T, now), is at most the lead away.
-- ARGV[6]  lead (µs)
-- ARGV[7]  visibility timeout (µs)
-- ARGV[8]  the most expired jobs to put back in one call
-- reply    {1, id, payload (false when its data is missing), slot, released,
--          attempt, deadline, now}, or
--          {0, wait}: the µs until a job may be released (-1: no job at all)
setup()
local lead, vis, batch = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local s = load()
local dirty = false
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', int(now), 'LIMIT', 0, batch)) do
  local slot = take(s, true)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[1], int(slot), id)
  dirty = true
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head == 0 then
  if dirty then
    save(s)
  end
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first == 0 then
    return {0, -1}
  end
  return {0, tonumber(first[2]) - now}
end
local id, slot = head[1], tonumber(head[2])
local at = math.max(earliest(s, slot), now)
if at > now + lead then
  if dirty then
    save(s)
  end
  return {0, at - now - lead}
end
redis.call('ZREM', KEYS[1], id)
local deadline = at + vis
redis.call('ZADD', KEYS[2], int(deadline), id)
local attempt = redis.call('HINCRBY', KEYS[4], id, 1)
s.last = at
save(s)
return {1, id, redis.call('HGET', KEYS[3], id), slot, at, attempt, deadline, now}
