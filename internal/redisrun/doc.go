// Package redisrun is sluice's one Redis layer, under redisstore and queue:
// it runs Lua scripts (Script, Call) through a Client (GoRedis adapts
// go-redis), knows which keys one script may name together (Router, Slot,
// OneNode, BySlot), gathers concurrent calls into pipelines (Batcher) and
// merges a store's decisions per group through what the store knows of its
// scripts (Merger: the argument layouts stay with the scripts, in
// redisstore), and holds the Lua helpers every script starts with
// (LuaHelpers).
package redisrun
