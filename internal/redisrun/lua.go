package redisrun

import _ "embed"

// LuaHelpers is the Lua every sluice script starts with (lua/helpers.lua):
// the library functions as locals, clock (the caller's time or the server's
// TIME), and fdiv and cdiv, the exact integer divisions on doubles.
//
//go:embed lua/helpers.lua
var LuaHelpers string
