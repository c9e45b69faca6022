-- reset: forgets the key.
return {redis.call('DEL', KEYS[1])}
