-- reset: forgets the keys (a key's rate state, its holds).
return {redis.call('DEL', unpack(KEYS))}
