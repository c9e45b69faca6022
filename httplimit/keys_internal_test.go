package httplimit

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzAppendIPv4Host checks the unparsed IPv4 key against peerAddr and
// AppendKey: whenever appendIPv4Host takes RemoteAddr as it is, peerAddr reads
// an IPv4 address from it whose key is the same text.
func FuzzAppendIPv4Host(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:8080", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:0080",
		"1.2.3.4", "1.2.3.4:", "1.2.3.4:65536", "01.2.3.4:80", "1.2.3.256:80",
		"1.2.3:80", "1.2.3.4.5:80", "[::1]:80", "::ffff:1.2.3.4", "[::ffff:1.2.3.4]:80",
		"1..3.4:80", "1.2.3.4:8a", "1.2.3.4:+80", "", ":", "1.2.3.4:80:80", "1.2.3.00:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := appendIPv4Host([]byte("p:"), s)
		a := peerAddr(&http.Request{RemoteAddr: s})
		if !ok {
			if string(b) != "p:" {
				t.Fatalf("%q: refused but wrote %q", s, b)
			}
			return
		}
		if !a.Is4() {
			t.Fatalf("%q: taken as %q, but peerAddr reads %v", s, b, a)
		}
		if want := noProxies.AppendKey([]byte("p:"), a); string(b) != string(want) {
			t.Fatalf("%q: key %q, AppendKey %q", s, b, want)
		}
	})
}

// TestAppendIPv4Host checks that the common forms are taken unparsed.
func TestAppendIPv4Host(t *testing.T) {
	for _, s := range []string{"192.0.2.1:8080", "10.0.0.255:1", "0.0.0.0:0"} {
		host := s[:strings.LastIndexByte(s, ':')]
		if b, ok := appendIPv4Host(nil, s); !ok || string(b) != host {
			t.Errorf("%q: %q, %v; want %q", s, b, ok, host)
		}
	}
}
