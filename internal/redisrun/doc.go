// Package redisrun is sluice's one Redis layer, under redisstore and queue:
// it runs Lua scripts (Script, Call) through a Client (GoRedis adapts
// go-redis), knows which keys one script may name together (Router, Slot,
// OneNode, BySlot), gathers concurrent calls into pipelines and merges the
// store's single decisions and composites per group (Batcher), writes the
// argument layouts of the store's scripts (Scripts, Single, Limit), and
// holds the Lua helpers every script starts with (LuaHelpers).
package redisrun
