package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
)

// llm is an upstream that streams an answer as server-sent events, its
// last event carrying the usage (OpenAI's stream_options include_usage),
// and waits for next before it sends that event.
func llm(next <-chan struct{}, total int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", total-12, total)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// TestTransportSpendsWhatTheStreamUsed: a streamed answer is passed
// through as it comes (its first event is read before the upstream sends
// the rest), and the key is settled to the last event's usage.
func TestTransportSpendsWhatTheStreamUsed(t *testing.T) {
	lim := frozenLimiter(newClock())
	next := make(chan struct{})
	up := httptest.NewServer(llm(next, 750))
	defer up.Close()
	l := sluice.PerMinute(10_000)
	tr, err := httplimit.NewTransport(lim, []httplimit.Policy{{
		Name: "tpm", Limit: l, Key: httplimit.Static("openai"), Cost: 100,
		Used: &httplimit.Used{JSON: []string{"usage", "total_tokens"}},
	}}, httplimit.WithBase(up.Client().Transport))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "Hel") {
		t.Fatalf("the first event: %q, %v", line, err)
	}
	if got := leftOf(t, lim, "httplimit-out:tpm:openai", l); got != 9900 {
		t.Errorf("mid-stream: %d left, want the estimate's 9900", got)
	}
	close(next)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the rest: %q, %v", rest, err)
	}
	if got := leftOf(t, lim, "httplimit-out:tpm:openai", l); got != 10_000-750 {
		t.Errorf("at the stream's end: %d left, want 9250", got)
	}
	resp.Body.Close() // settled once only
	if got := leftOf(t, lim, "httplimit-out:tpm:openai", l); got != 9250 {
		t.Errorf("after Close: %d left, want 9250", got)
	}
}

// TestTransportSpendsWhatTheHeaderSays: a header, a trailer, a function of
// the response; a body closed early; a body that says it wrong.
func TestTransportSpendsWhatTheHeaderSays(t *testing.T) {
	l := sluice.PerMinute(10_000)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/header":
			w.Header().Set("X-Tokens-Used", "40")
			io.WriteString(w, "ok")
		case "/trailer":
			w.Header().Set("Trailer", "X-Tokens-Used")
			io.WriteString(w, strings.Repeat("x", 5000))
			w.Header().Set("X-Tokens-Used", "4000")
		case "/bad":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"usage":{"total_tokens":"many"}}`)
		default:
			io.WriteString(w, strings.Repeat("y", 300))
		}
	}))
	defer up.Close()
	for _, tc := range []struct {
		path   string
		used   httplimit.Used
		read   int // bytes read before Close; -1 all
		left   int64
		logged string
	}{
		{"/header", httplimit.Used{Header: "X-Tokens-Used"}, -1, 9960, ""},
		{"/trailer", httplimit.Used{Header: "X-Tokens-Used"}, -1, 6000, ""},
		{"/trailer", httplimit.Used{Header: "X-Tokens-Used"}, 10, 9900, ""}, // closed before the trailer: the estimate stands
		{"/bytes", httplimit.Used{Func: func(_ *http.Request, resp *httplimit.Response) (int64, bool) { return resp.Bytes, true }}, 120, 9880, ""},
		{"/bytes", httplimit.Used{Func: func(_ *http.Request, resp *httplimit.Response) (int64, bool) { return resp.Bytes, true }}, -1, 9700, ""},
		{"/bad", httplimit.Used{JSON: []string{"usage", "total_tokens"}}, -1, 9900, `["usage" "total_tokens"] is a string`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			lim := frozenLimiter(newClock())
			var logged errLog
			tr, err := httplimit.NewTransport(lim, []httplimit.Policy{{Name: "tpm", Limit: l, Key: httplimit.Static("k"), Cost: 100, Used: &tc.used}},
				httplimit.WithBase(up.Client().Transport), httplimit.WithTransportErrorLog(logged.log))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := (&http.Client{Transport: tr}).Get(up.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.read < 0 {
				_, err = io.ReadAll(resp.Body)
			} else {
				_, err = io.ReadFull(resp.Body, make([]byte, tc.read))
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := leftOf(t, lim, "httplimit-out:tpm:k", l); got != tc.left {
				t.Errorf("%d left, want %d", got, tc.left)
			}
			errs := logged.take()
			if tc.logged == "" && len(errs) > 0 || tc.logged != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.logged)) {
				t.Errorf("logged %v, want %q", errs, tc.logged)
			}
		})
	}
}

// TestTransportsShareWhatWasUsed: two clients (two processes over one
// store) keep to one tokens-per-minute budget: what one's upstream said
// it used holds the other back.
func TestTransportsShareWhatWasUsed(t *testing.T) {
	lim := sluice.New(memstore.New()) // the deadline is the system clock's
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "950")
	}))
	defer up.Close()
	policies := []httplimit.Policy{{Name: "tpm", Limit: sluice.PerMinute(1000), Key: httplimit.Static("provider"), Cost: 100,
		Used: &httplimit.Used{Header: "X-Tokens-Used"}}}
	clients := make([]*http.Client, 2)
	for i := range clients {
		tr, err := httplimit.NewTransport(lim, policies, httplimit.WithBase(up.Client().Transport))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = &http.Client{Transport: tr}
	}
	resp, err := clients[0].Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", up.URL, nil)
	// 50 left; the next estimate of 100 passes in 3s, after the deadline:
	// refused at once.
	if _, err := clients[1].Do(req); !errors.Is(err, sluice.ErrDeadline) {
		t.Errorf("the other client: %v, want ErrDeadline", err)
	}
}
