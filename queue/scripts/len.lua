-- len.lua: the jobs the queue holds, waiting or in flight, as {n}.
return {redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])}
