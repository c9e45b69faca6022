// Package redistest starts real redis-server processes for tests of the
// Redis store: a standalone server per test ([Standalone]), one standalone
// server shared by all tests of a test binary ([Shared] together with
// [Main]), a three-master Redis Cluster ([Cluster]) and one such cluster
// shared by all tests of a test binary ([SharedCluster], with [Main]).
//
// Servers listen on free ports on 127.0.0.1 only, keep no data on disk
// (--save "" --appendonly no) and are stopped when the test that started
// them finishes. On Linux every redis-server is also started with a parent
// death signal, so it is killed even if the test binary crashes or is
// killed; on other systems the processes are stopped by test cleanups and
// [Main] only.
//
// If redis-server is not on PATH the tests that need it are skipped, loudly;
// set SLUICE_REQUIRE_REDIS=1 (for example in CI) to make that a failure
// instead. See [Require].
//
// All functions that take a testing.TB must be called from the goroutine
// running the test, as they may call t.Fatal.
package redistest
