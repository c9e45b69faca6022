-- ack.lua: removes a job for good, in flight or back in due.
-- ARGV[1]  the job's id
-- reply    {1}, or {0} when the queue does not hold the job
local n = redis.call('ZREM', KEYS[2], ARGV[1]) + redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return {n}
