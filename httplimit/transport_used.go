package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/sluice-go/sluice/internal/policycore"
)

// watch settles what req spent (ss) once resp's body has been read to its
// end or closed, reading what the response says it used on the way. A
// response without a body to read (a protocol switch) is settled now.
func (t *Transport) watch(req *http.Request, resp *http.Response, ss []policycore.Spend) {
	b := &usedBody{body: resp.Body, t: t, req: req, resp: resp, spent: ss}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil {
		b.settle()
		return
	}
	resp.Body = b
}

// usedBody is an upstream's response body that is settled once read to
// its end or closed: it passes the body on as it is read, counting its
// bytes and reading its JSON usages (the policycore.Outcome of Settle).
type usedBody struct {
	body  io.ReadCloser
	t     *Transport
	req   *http.Request
	resp  *http.Response
	spent []policycore.Spend

	// mu guards what Read keeps; once settled, Read keeps nothing more.
	mu      sync.Mutex
	settled bool
	bytes   int64
	scans   []*usage // each Used.JSON's (policy.scan), made at the first read
}

// Read reads the body, and settles at its end.
func (b *usedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.mu.Lock()
	if !b.settled && n > 0 {
		b.bytes += int64(n)
		if b.t.scans > 0 {
			if b.scans == nil {
				b.startScans()
			}
			for _, s := range b.scans {
				s.write(p[:n])
			}
		}
	}
	b.mu.Unlock()
	if err == io.EOF {
		b.settle()
	}
	return n, err
}

// Close closes the body, and settles what was read of it.
func (b *usedBody) Close() error {
	err := b.body.Close()
	b.settle()
	return err
}

// startScans makes a usage for each Used.JSON, for the body's type.
func (b *usedBody) startScans() {
	b.scans = make([]*usage, b.t.scans)
	ct := b.resp.Header.Get("Content-Type")
	for _, p := range b.t.policies {
		if p.scan >= 0 {
			b.scans[p.scan] = newUsage(p.used.JSON, p.maxBytes(), ct)
		}
	}
}

// settle settles once: a failure goes to WithTransportErrorLog's function.
func (b *usedBody) settle() {
	b.mu.Lock()
	done := b.settled
	b.settled = true
	b.mu.Unlock()
	if done {
		return
	}
	if err := policycore.Settle(context.WithoutCancel(b.req.Context()), b.t.lim, b.spent, b); err != nil {
		b.t.logError(b.req, fmt.Errorf("httplimit: settling what %s used: %w", b.req.URL.Redacted(), err))
	}
}

// Counts is never asked: no policy counts outbound.
func (b *usedBody) Counts(*policycore.Rule) bool { return true }

// Used is what the upstream's response says the request used under r's
// Used; what cannot be read goes to WithTransportErrorLog's function and
// says nothing.
func (b *usedBody) Used(r *policycore.Rule) (int64, bool) {
	var p *policy
	for _, q := range b.t.policies {
		if &q.Rule == r {
			p = q
		}
	}
	var s *usage
	if p.scan >= 0 && b.scans != nil && b.bytes > 0 { // no body says nothing
		s = b.scans[p.scan]
	}
	resp := Response{StatusCode: b.resp.StatusCode, Header: b.resp.Header, Trailer: b.resp.Trailer, Bytes: b.bytes}
	n, ok, err := p.readUsed(b.req, resp, s)
	if err != nil {
		b.t.logError(b.req, err)
	}
	return n, ok
}

// logError gives err to WithTransportErrorLog's function, if any.
func (t *Transport) logError(req *http.Request, err error) {
	if t.onError != nil {
		t.onError(req, err)
	}
}
