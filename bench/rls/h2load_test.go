package rls

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

func TestHeaderBlock(t *testing.T) {
	bs := headerBlock("127.0.0.1:8081", "/a.B/C")
	want := ":method: POST|:scheme: http|:path: /a.B/C|:authority: 127.0.0.1:8081|content-type: application/grpc|te: trailers"
	decode := func(dec *hpack.Decoder, got *[]string, block []byte) {
		t.Helper()
		*got = (*got)[:0]
		if _, err := dec.Write(block); err != nil {
			t.Fatal(err)
		}
		if err := dec.Close(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(*got, "|") != want {
			t.Errorf("decoded %q, want %q", strings.Join(*got, "|"), want)
		}
	}
	// With the table: the first block, then the steady one on every later
	// stream, decode alike; the steady one names every field by index and
	// leaves the table as it is (its size after three streams is the
	// first's).
	var got []string
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f.Name+": "+f.Value) })
	decode(dec, &got, bs.first)
	if len(bs.steady) >= len(bs.plain) || len(bs.steady) > 8 {
		t.Errorf("steady block of %d bytes (plain %d): not indexed", len(bs.steady), len(bs.plain))
	}
	decode(dec, &got, bs.steady)
	decode(dec, &got, bs.steady)
	if _, err := dec.Write([]byte{0x80 | byte(62+4)}); err == nil { // a fifth dynamic entry
		t.Error("the steady block added entries to the dynamic table")
	}
	// Without: the same bytes on every stream, nothing in the table (its
	// first entry, index 62, does not exist).
	dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f.Name+": "+f.Value) })
	decode(dec, &got, bs.plain)
	decode(dec, &got, bs.plain)
	if _, err := dec.Write([]byte{0x80 | 62}); err == nil {
		t.Error("the plain block added an entry to the dynamic table")
	}
}

// TestHeaderBlockTableSize: a connection sends the first block, then the
// steady one, when the server's SETTINGS_HEADER_TABLE_SIZE holds the fields
// (the default 4096 included); the plain one on every call when it is
// smaller; and a server that shrinks its table after the first call ends the
// connection with an error.
func TestHeaderBlockTableSize(t *testing.T) {
	bs := headerBlock("127.0.0.1:8081", "/a.B/C")
	settings := func(c *h2Conn, size uint32) error {
		p := make([]byte, 6)
		binary.BigEndian.PutUint16(p, uint16(http2.SettingHeaderTableSize))
		binary.BigEndian.PutUint32(p[2:], size)
		return c.onSettings(http2.FrameHeader{Type: http2.FrameSettings, Length: 6}, p)
	}
	for _, tc := range []struct {
		size uint32 // 0: no SETTINGS_HEADER_TABLE_SIZE sent
		want [][]byte
	}{
		{0, [][]byte{bs.first, bs.steady, bs.steady}},
		{4096, [][]byte{bs.first, bs.steady, bs.steady}},
		{bs.tableSize, [][]byte{bs.first, bs.steady, bs.steady}},
		{bs.tableSize - 1, [][]byte{bs.plain, bs.plain, bs.plain}},
	} {
		c := &h2Conn{blocks: bs, fr: http2.NewFramer(io.Discard, nil)}
		if tc.size > 0 {
			if err := settings(c, tc.size); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range tc.want {
			if got := c.nextBlock(); !bytes.Equal(got, want) {
				t.Errorf("table size %d, call %d: block %x, want %x", tc.size, i, got, want)
			}
		}
		if tc.size == 0 {
			if err := settings(c, 0); err == nil {
				t.Error("a table shrunk after the first call was accepted")
			}
		}
	}
}

// testSluice is the sluice command the tests below build once.
var testSluice struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testSluice.dir != "" {
		os.RemoveAll(testSluice.dir)
	}
	os.Exit(code)
}

// buildSluiceOnce builds the sluice command for the package's tests, once.
func buildSluiceOnce(ctx context.Context) (string, error) {
	testSluice.once.Do(func() {
		var modDir string
		if modDir, testSluice.err = ModuleDir(ctx); testSluice.err != nil {
			return
		}
		if testSluice.dir, testSluice.err = os.MkdirTemp("", "rls-test-"); testSluice.err != nil {
			return
		}
		testSluice.path, testSluice.err = BuildSluice(ctx, modDir, testSluice.dir)
	})
	return testSluice.path, testSluice.err
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
	bin, err := buildSluiceOnce(ctx)
	if errors.Is(err, ErrNoServe) {
		t.Skipf("SKIPPING: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.File, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := StartSluice(ctx, bin, dir, files, "memory", nil)
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

func marshal(t testing.TB, m proto.Message) []byte {
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

// serveBytes listens on a loopback port for one connection, on which it
// reads the client's preface, writes the server's SETTINGS and then b, and
// closes the connection after a moment of reading.
func serveBytes(t testing.TB, b []byte) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		nc, err := l.Accept()
		l.Close()
		if err != nil {
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(time.Second))
		buf := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(nc, buf); err != nil {
			return
		}
		w := bufio.NewWriter(nc)
		_ = http2.NewFramer(w, nil).WriteSettings()
		_, _ = w.Write(b)
		_ = w.Flush()
		// Give the client a moment to read before the close.
		_ = nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _ = io.Copy(io.Discard, nc)
	}()
	return l.Addr().String()
}

// h2Response returns the frames of a gRPC response on stream id: headers,
// the message resp, trailers with grpc-status st.
func h2Response(id uint32, resp []byte, st string) []byte {
	var out, hb bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&hb)
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
	msg := make([]byte, 5+len(resp))
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(resp)))
	copy(msg[5:], resp)
	_ = fr.WriteData(id, false, msg)
	hb.Reset()
	_ = enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: st})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	return out.Bytes()
}

// FuzzH2Responses feeds the H2 generator arbitrary bytes as the server's
// frames after its SETTINGS: the run ends, with an error or answers, and
// never panics or counts more calls than it made.
func FuzzH2Responses(f *testing.F) {
	ok := marshal(f, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK})
	over := marshal(f, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT})
	f.Add(h2Response(1, ok, "0"))
	f.Add(append(h2Response(1, over, "0"), h2Response(3, ok, "0")...))
	f.Add(h2Response(1, ok, "8"))
	f.Add(h2Response(3, ok, "0"))
	f.Add(h2Response(1, []byte{0xff}, "0"))
	f.Add([]byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}) // PING
	f.Add([]byte{0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}) // GOAWAY
	f.Add([]byte{0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8})             // RST_STREAM
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})       // WINDOW_UPDATE
	f.Add([]byte{0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0})       // SETTINGS: no streams
	f.Add([]byte{0, 0, 3, 1, 0x0c, 0, 0, 0, 1, 5, 0x88, 0})          // HEADERS, padded
	f.Add([]byte{0, 0, 1, 0, 1, 0, 0, 0, 1, 0})                      // DATA, END_STREAM
	f.Add([]byte{0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1})                // too large
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := dialH2(serveBytes(t, b), 1, fullMethod, [][]byte{marshal(t, Request("u1"))})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Run(ctx, Options{Callers: 2, Calls: 4, Timeout: time.Second})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the run outlasted its watchdog: %v", err)
		}
		if r != nil && r.Calls+r.Errors > 4 {
			t.Errorf("%d answered and %d errors of 4 calls", r.Calls, r.Errors)
		}
	})
}
