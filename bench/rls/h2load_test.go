package rls

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

func TestHeaderBlock(t *testing.T) {
	block := headerBlock("127.0.0.1:8081", "/a.B/C")
	var got []string
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f.Name+": "+f.Value) })
	for range 2 { // the same bytes decode alike on every stream
		got = got[:0]
		if _, err := dec.Write(block); err != nil {
			t.Fatal(err)
		}
		if err := dec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := ":method: POST|:scheme: http|:path: /a.B/C|:authority: 127.0.0.1:8081|content-type: application/grpc|te: trailers"
	if strings.Join(got, "|") != want {
		t.Errorf("decoded %q, want %q", strings.Join(got, "|"), want)
	}
	// Nothing entered the server's dynamic table: its first entry (index
	// 62) does not exist.
	if _, err := dec.Write([]byte{0x80 | 62}); err == nil {
		t.Error("the block added an entry to the dynamic table")
	}
}

// sluiceBin is the sluice command the tests below build once.
var sluiceBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sluiceBin.dir != "" {
		os.RemoveAll(sluiceBin.dir)
	}
	os.Exit(code)
}

// startSluice starts `sluice serve --store memory` with the configuration
// config (envoyproxy/ratelimit's YAML) until t ends. It skips under -short
// and where the working tree's sluice has no serve.
func startSluice(t *testing.T, config string) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPING: -short (builds and starts sluice serve)")
	}
	ctx := context.Background()
	sluiceBin.once.Do(func() {
		var modDir string
		if modDir, sluiceBin.err = ModuleDir(ctx); sluiceBin.err != nil {
			return
		}
		if sluiceBin.dir, sluiceBin.err = os.MkdirTemp("", "rls-test-"); sluiceBin.err != nil {
			return
		}
		sluiceBin.path, sluiceBin.err = BuildSluice(ctx, modDir, sluiceBin.dir)
	})
	if errors.Is(sluiceBin.err, ErrNoServe) {
		t.Skipf("SKIPPING: %v", sluiceBin.err)
	}
	if sluiceBin.err != nil {
		t.Fatal(sluiceBin.err)
	}
	dir := t.TempDir()
	files, err := WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.File, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := StartSluice(ctx, sluiceBin.path, dir, files, "memory", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// dialWith connects generator g with the method's full name and requests.
func dialWith(t *testing.T, g Generator, addr string, conns int, method string, reqs ...[]byte) Loader {
	t.Helper()
	var (
		l   Loader
		err error
	)
	if g == H2 {
		l, err = dialH2(addr, conns, method, reqs)
	} else {
		l, err = dialGRPC(addr, conns, method, reqs)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dayLimited is a configuration in which each user value has 50 calls a
// day: a fixed number of calls with one value gets exactly 50 OK.
const dayLimited = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 50
`

// TestGeneratorsAgree runs both load generators against one `sluice serve`
// (memory store) and checks they get the same answers: every call of a
// fixed number answered, and of 1000 calls with one value, exactly 50 OK.
func TestGeneratorsAgree(t *testing.T) {
	s := startSluice(t, dayLimited)
	const n = 3000
	for _, g := range Generators {
		t.Run(string(g), func(t *testing.T) {
			day := time.Now().UTC().YearDay()
			value := "one-" + string(g)
			c := dialWith(t, g, s.Addr, 2, fullMethod, marshal(t, Request(value)))
			r, err := c.Run(context.Background(), Options{Callers: 16, Calls: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().UTC().YearDay() != day {
				t.Skip("SKIPPING: the run crossed midnight UTC, the day's window changed")
			}
			if r.Calls != 1000 || r.Over != 1000-50 || r.Errors != 0 || r.Hist.Count() != 1000 {
				t.Errorf("%d answered, %d over the limit, %d errors (%v), %d latencies; want 1000, 950, 0, 1000",
					r.Calls, r.Over, r.Errors, r.FirstErr, r.Hist.Count())
			}

			// The workload's values (of them only the hot one, in another
			// run, can reach its 50 a day).
			c, err = DialLoader(g, s.Addr, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			r, err = c.Run(context.Background(), Options{Calls: n})
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if r.Calls != n || r.Errors != 0 || r.Hist.Count() != n {
				t.Errorf("workload: %d answered, %d errors (%v), %d latencies; want %d, 0, %d",
					r.Calls, r.Errors, r.FirstErr, r.Hist.Count(), n, n)
			}
			allocs := float64(after.Mallocs-before.Mallocs) / n
			t.Logf("%s: %.2f allocations per call (the whole process, run set-up included)", g, allocs)
			if g == H2 && allocs > 0.5 {
				t.Errorf("h2: %.2f allocations per call, want about 0", allocs)
			}
		})
	}
}

// TestGeneratorsCountErrors checks that both generators count the calls
// the server fails, with the same first error: an unknown method
// (Unimplemented) and a request without a domain (InvalidArgument).
func TestGeneratorsCountErrors(t *testing.T) {
	s := startSluice(t, dayLimited)
	noDomain := Request("u1")
	noDomain.Domain = ""
	for _, c := range []struct {
		name, method, want string
		req                []byte
	}{
		{"unknown method", "/envoy.service.ratelimit.v3.RateLimitService/Nope", "Unimplemented", marshal(t, Request("u1"))},
		{"no domain", fullMethod, "InvalidArgument", marshal(t, noDomain)},
	} {
		t.Run(c.name, func(t *testing.T) {
			firstErrs := map[Generator]string{}
			for _, g := range Generators {
				l := dialWith(t, g, s.Addr, 2, c.method, c.req)
				r, err := l.Run(context.Background(), Options{Callers: 8, Calls: 200})
				if err != nil {
					t.Fatalf("%s: %v", g, err)
				}
				if r.Calls != 0 || r.Errors != 200 || r.Hist.Count() != 200 || r.FirstErr == nil || !strings.Contains(r.FirstErr.Error(), c.want) {
					t.Errorf("%s: %d answered, %d errors, %d latencies, first %v; want 0, 200, 200, %s",
						g, r.Calls, r.Errors, r.Hist.Count(), r.FirstErr, c.want)
				}
				firstErrs[g] = fmt.Sprint(r.FirstErr)
			}
			if firstErrs[H2] != firstErrs[GRPC] {
				t.Errorf("first errors differ: h2 %q, grpc %q", firstErrs[H2], firstErrs[GRPC])
			}
		})
	}
}

// TestServerGoneMidRun stops the server in the middle of a run: killed
// (the connections close) or told to stop (GOAWAY, then close). The H2
// generator ends the run at once with an error; grpc-go's client, which
// reconnects, counts the failed calls until the run's end.
func TestServerGoneMidRun(t *testing.T) {
	for _, c := range []struct {
		g   Generator
		sig syscall.Signal
	}{{H2, syscall.SIGKILL}, {H2, syscall.SIGTERM}, {GRPC, syscall.SIGKILL}} {
		t.Run(fmt.Sprintf("%s/%v", c.g, c.sig), func(t *testing.T) {
			s := startSluice(t, dayLimited)
			l, err := DialLoader(c.g, s.Addr, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			d := 60 * time.Second
			if c.g == GRPC {
				d = 2 * time.Second
			}
			time.AfterFunc(300*time.Millisecond, func() { _ = s.cmd.Process.Signal(c.sig) })
			start := time.Now()
			r, err := l.Run(context.Background(), Options{Duration: d, Timeout: 30 * time.Second})
			took := time.Since(start)
			if r != nil {
				t.Logf("after %v: %v; %d answered, %d errors (first %v)", took.Round(time.Millisecond), err, r.Calls, r.Errors, r.FirstErr)
			} else {
				t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			}
			if took > 20*time.Second {
				t.Errorf("the run took %v after the server went", took)
			}
			switch {
			case c.g == H2 && err == nil:
				t.Error("h2: no error")
			case c.g == GRPC && (r == nil || r.Errors == 0):
				t.Error("grpc: no failed call counted")
			}
		})
	}
}

// fullMethod is ShouldRateLimit's full method name, the HTTP/2 :path.
const fullMethod = rlsv3.RateLimitService_ShouldRateLimit_FullMethodName
