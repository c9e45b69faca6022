package serve

import (
	"strings"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
)

// RLQSView is what the console shows of the RLQS budgets (Server.RLQS).
type RLQSView struct {
	// Budgets is how many budgets the allocator holds, Clients how many
	// streams are open.
	Budgets, Clients int
	// Top are the budgets whose clients demand the most per second, each
	// with its largest shares.
	Top []RLQSBudget
	// Bytes is what Top's strings and figures take, at most the service's
	// view-bytes; Bound, when set, says why a budget was left out.
	Bytes int64
	Bound error
}

// RLQSBudget is one budget: its rule's domain and name, and the
// allocator's view of it (rlqs.BucketView).
type RLQSBudget struct {
	Domain, Rule string
	rlqs.BucketView
}

// What the view counts for a budget and a share besides a budget's
// strings: about what their figures take in the console's JSON.
const (
	rlqsViewBudgetBytes = 256
	rlqsViewShareBytes  = 192
)

// RLQS returns the n budgets whose clients demand the most per second,
// each with its m largest shares, as far as the service's view-bytes
// allows; ok is false without --rlqs. It holds the service's lock for
// the budgets it shows only (rlqs.Allocator.Hottest), whatever the
// number of budgets.
func (s *Server) RLQS(n, m int) (v RLQSView, ok bool) {
	if s.rlqs == nil {
		return v, false
	}
	return s.rlqs.view(&s.opts.Limits, n, m), true
}

// view is Server.RLQS's view under lt's view-bytes.
func (q *rlqsService) view(lt *limits.Table, n, m int) (v RLQSView) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v.Budgets, v.Clients, v.Top = q.alloc.Budgets(), len(q.streams), []RLQSBudget{}
	q.alloc.Hottest(q.now(), n, m, func(b *rlqs.BucketView) bool {
		need := rlqsViewBudgetBytes + int64(len(b.Key)+len(b.Family)) + rlqsViewShareBytes*int64(len(b.Shares))
		if err := lt.Check(limits.ViewBytes, "the RLQS view's bytes with another budget", v.Bytes+need); err != nil {
			v.Bound = err
			return false
		}
		v.Bytes += need
		domain, rule, _ := strings.Cut(b.Family, "\x00")
		v.Top = append(v.Top, RLQSBudget{Domain: domain, Rule: rule, BucketView: *b})
		return true
	})
	return v
}
