package redisrun

import (
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"sync"
)

// Script is a Lua script, run by EVALSHA with EVAL as the fallback when the
// server does not have it (NOSCRIPT: after SCRIPT FLUSH, a restart or a
// failover) or refuses EVALSHA (an ACL without it).
type Script struct {
	// Src is the script's source.
	Src  string
	once sync.Once
	sha  string
}

// NewScript returns src as a Script. Its SHA-1 digest is computed on first
// use (SHA), not here: a program run with GODEBUG=fips140=only may import
// this package.
func NewScript(src string) *Script { return &Script{Src: src} }

// SHA returns the script's SHA-1 digest in hex, the name EVALSHA runs it by,
// computed on first use. It returns "" where SHA-1 may not be used
// (GODEBUG=fips140=only): run the script by EVAL then, or by the digest the
// server returns for SCRIPT LOAD (the adapter GoRedis does the latter).
func (s *Script) SHA() string {
	s.once.Do(func() {
		if fips140.Enforced() {
			return
		}
		h := sha1.Sum([]byte(s.Src))
		s.sha = hex.EncodeToString(h[:])
	})
	return s.sha
}

// Call is one script run: its keys and arguments in, its reply or error out.
// A script replies an array of integers, read into Reply; a call marked
// Mixed replies an array of any values (integers, strings, nil for Lua's
// false), read into Values.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
	Mixed  bool
	Reply  []int64
	Values []any
	Err    error
}
