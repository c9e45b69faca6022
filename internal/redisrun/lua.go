package redisrun

import (
	_ "embed"
	"io/fs"
)

// LuaHelpers is the Lua every sluice script starts with (lua/helpers.lua):
// the library functions as locals, clock (the caller's time or the server's
// TIME), and fdiv and cdiv, the exact integer divisions on doubles.
//
//go:embed lua/helpers.lua
var LuaHelpers string

// MustRead returns the file name of an embedded scripts folder. Its files
// are compiled in, so a missing one is a build mistake: it panics at init.
func MustRead(scripts fs.FS, name string) string {
	b, err := fs.ReadFile(scripts, "scripts/"+name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
