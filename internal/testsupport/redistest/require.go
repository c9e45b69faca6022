package redistest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a test failure when set to "1".
const RequireEnv = "SLUICE_REQUIRE_REDIS"

// Require skips the test, with a loud message, if redis-server is not on
// PATH; if RequireEnv (SLUICE_REQUIRE_REDIS) is "1" it fails the test
// instead. Standalone, Shared and Cluster call it first.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(serverBinary); err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal("redis-server not found on PATH and " + RequireEnv + "=1: FAILING Redis tests; " +
			"install redis-server (Debian: apt-get install redis-server)")
	}
	t.Skip("redis-server not found: SKIPPING Redis tests; install redis-server " +
		"(Debian: apt-get install redis-server) or set " + RequireEnv + "=1 to make this a failure")
}
