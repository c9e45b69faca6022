package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
)

// TestMetadataCannotReachAnotherPolicysKey: a policy's keys are prefix +
// name + ":" + key, so a name with ':' let a client's metadata under
// policy "tenant" name policy "tenant:all"'s key: x-tenant "all:global"
// spent its Static("global") budget. Names with ':' are refused by a
// Server and a Client, and the metadata's ':' stays in the tenant's key.
func TestMetadataCannotReachAnotherPolicysKey(t *testing.T) {
	lim := frozen()
	tenant := grpclimit.Policy{Name: "tenant", Limit: sluice.PerMinute(100), Key: grpclimit.Metadata("x-tenant")}
	global := grpclimit.Policy{Name: "tenant:all", Limit: sluice.PerMinute(1), Key: grpclimit.Static("global")}
	_, serverErr := grpclimit.New(lim, []grpclimit.Policy{tenant, global})
	_, clientErr := grpclimit.NewClient(lim, []grpclimit.Policy{global})
	for _, err := range []error{serverErr, clientErr} {
		if err == nil || !strings.Contains(err.Error(), "':'") {
			t.Errorf("the name %q was accepted, or the error does not say ':' is refused: %v", global.Name, err)
		}
	}
	conn := serve(t, mustNew(t, lim, []grpclimit.Policy{tenant}), &echoServer{})
	if err := echo(metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "all:global"), conn); err != nil {
		t.Fatal(err)
	}
	look, err := lim.Take(context.Background(), "grpclimit:tenant:all:global", tenant.Limit, 0)
	if err != nil || look.Remaining != 99 {
		t.Errorf("x-tenant all:global: its key under tenant has %d left (%v), want 99", look.Remaining, err)
	}
}

// figs is one policy's figures as a client reads them from both fields.
type figs struct{ q, w, r, t int64 }

// readFields reads the draft-11 fields of md with an independent RFC 9651
// parser (httpsfv): each policy once, its name percent-decoded, r never
// above q. It returns the figures by name and the names in order.
func readFields(t *testing.T, md metadata.MD) (map[string]figs, []string) {
	t.Helper()
	out := map[string]figs{}
	var order []string
	for _, f := range []struct {
		key    string
		params [2]string
	}{{"ratelimit-policy", [2]string{"q", "w"}}, {"ratelimit", [2]string{"r", "t"}}} {
		vals := md.Get(f.key)
		if len(vals) == 0 {
			t.Fatalf("no %s in %v", f.key, md)
		}
		l, err := httpsfv.UnmarshalList(vals)
		if err != nil {
			t.Fatalf("%s %q is not an RFC 9651 List: %v", f.key, vals, err)
		}
		seen := map[string]bool{}
		for _, m := range l {
			it, ok := m.(httpsfv.Item)
			s, isString := it.Value.(string)
			if !ok || !isString {
				t.Fatalf("%s %q: %v is not an Item with a String", f.key, vals, m)
			}
			name, err := url.PathUnescape(s)
			if err != nil {
				t.Fatalf("%s %q: name %q does not percent-decode", f.key, vals, s)
			}
			if seen[name] {
				t.Errorf("%s %q names %q twice", f.key, vals, name)
			}
			seen[name] = true
			var n [2]int64
			for i, p := range f.params {
				v, _ := it.Params.Get(p)
				if n[i], ok = v.(int64); !ok {
					t.Fatalf("%s %q: %q has %s=%v, want an Integer", f.key, vals, name, p, v)
				}
			}
			fg := out[name]
			if f.key == "ratelimit" {
				fg.r, fg.t = n[0], n[1]
				if fg.r > fg.q {
					t.Errorf("%q: r=%d above q=%d", name, fg.r, fg.q)
				}
			} else {
				fg.q, fg.w = n[0], n[1]
				order = append(order, name)
			}
			out[name] = fg
		}
	}
	return out, order
}

// TestMetadataParsesAsRFC9651: the fields of a unary call, with a '%' in a
// name, a capacity beyond 15 digits and a shadow policy, read with httpsfv.
func TestMetadataParsesAsRFC9651(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "50% off", Limit: sluice.PerMinute(2).WithBurst(3)},
		{Name: "huge", Limit: sluice.Per(1<<50, time.Second).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("all")},
		{Name: "window", Limit: sluice.Per(30, 90*time.Second).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("all"), Shadow: true},
	}, grpclimit.WithShadowHeaders())
	conn := serve(t, s, &echoServer{})
	var md metadata.MD
	if err := echo(context.Background(), conn, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	got, order := readFields(t, md)
	want := map[string]figs{"50% off": {3, 90, 2, 30}, "huge": {999_999_999_999_999, 1, 999_999_999_999_999, 1}, "window": {30, 90, 29, 90}}
	if fmt.Sprint(got) != fmt.Sprint(want) || strings.Join(order, ",") != "50% off,huge,window" {
		t.Errorf("read %v in order %q\nwant %v", got, order, want)
	}
}

// TestStreamMetadataOncePerPolicy: a PerMessage stream decides each
// message; its header carries each policy once, with the figures of the
// latest decision before the header went out, and when later messages
// were decided its trailer carries each policy once with the latest.
func TestStreamMetadataOncePerPolicy(t *testing.T) {
	policies := []grpclimit.Policy{
		{Name: "streams", Limit: sluice.PerHour(2), Key: grpclimit.Metadata("x-user")},
		{Name: "messages", Limit: sluice.PerHour(1).WithBurst(5), Key: grpclimit.Metadata("x-user"), Stream: grpclimit.PerMessage},
	}
	ctx := withUser(context.Background(), "alice")

	t.Run("header after every message", func(t *testing.T) {
		conn := serve(t, mustNew(t, frozen(), policies), &echoServer{})
		cs, err := conn.NewStream(ctx, collectDesc, collectMethod)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := cs.SendMsg(wrapperspb.String(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		md, err := cs.Header()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := readFields(t, md)
		if got["streams"].r != 1 || got["messages"].r != 2 || len(got) != 2 {
			t.Errorf("header %v: read %v, want streams r=1 and messages r=2 (after 3 messages)", md, got)
		}
	})

	t.Run("header after the first message", func(t *testing.T) {
		conn := serve(t, mustNew(t, frozen(), policies), &echoServer{})
		cs, err := conn.NewStream(ctx, chatDesc, chatMethod)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := cs.SendMsg(wrapperspb.String(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
			t.Fatalf("end of stream: %v", err)
		}
		md, err := cs.Header()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := readFields(t, md)
		if got["streams"].r != 1 || got["messages"].r != 4 || len(got) != 2 {
			t.Errorf("header %v: read %v, want streams r=1 and messages r=4 (the first message's)", md, got)
		}
		got, _ = readFields(t, cs.Trailer())
		if got["streams"].r != 1 || got["messages"].r != 2 || len(got) != 2 {
			t.Errorf("trailer %v: read %v, want streams r=1 and messages r=2 (the last message's)", cs.Trailer(), got)
		}
	})
}
