package console

import (
	"net/http"
	"strconv"
)

// RLQS is what the console shows of the budgets `sluice serve --rlqs`
// shares among Envoy's RLQS clients (docs/rlqs.md): the budgets whose
// clients demand the most, each with its largest shares.
type RLQS struct {
	// Budgets is how many budgets the service shares now, Clients how
	// many RLQS streams are open.
	Budgets int `json:"budgets"`
	Clients int `json:"clients"`
	// Bytes is what Top takes, at most MaxBytes (the service's
	// view-bytes); Bound, when set, says why a budget was left out.
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	Bound    string `json:"bound,omitempty"`
	// Top are the budgets whose clients demand the most per second, at
	// most Options.TopK, the hottest first.
	Top []RLQSBudget `json:"top"`
}

// RLQSBudget is one budget: one rule's rate, shared by the clients that
// report buckets it limits. Its figures are tokens per its fill
// interval, FillS seconds.
type RLQSBudget struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	Rate   int64  `json:"rate"`
	FillS  int64  `json:"fill_s"`
	// Outstanding is Σ of the clients' leases (what they may still
	// enforce), Room Rate − Outstanding: what the bound leaves to
	// grant now.
	Outstanding int64 `json:"outstanding"`
	Room        int64 `json:"room"`
	// Clients take a share now; Holders are those and the clients gone
	// whose leases still count.
	Clients int `json:"clients"`
	Holders int `json:"holders"`
	// Demand is the clients' estimated demand, Granted the grants in
	// force at them.
	Demand  float64 `json:"demand"`
	Granted int64   `json:"granted"`
	// Shares are the largest grants, at most Options.TopK.
	Shares []RLQSShare `json:"shares"`
}

// RLQSShare is one client's share of a budget (a client's bucket: its
// holder number).
type RLQSShare struct {
	Holder uint64 `json:"holder"`
	Weight int64  `json:"weight"`
	// State is active, gone (its stream closed), abandoned or silent.
	State string `json:"state"`
	// Demand is its estimated demand, absent until a second of reports
	// made one.
	Demand *float64 `json:"demand,omitempty"`
	// Granted is its share, the grant in force (0 when none is);
	// Outstanding its lease; GrantEndsUS and LeaseEndsUS when they run
	// out, µs from now (0: none).
	Granted     int64 `json:"granted"`
	Outstanding int64 `json:"outstanding"`
	GrantEndsUS int64 `json:"grant_ends_us"`
	LeaseEndsUS int64 `json:"lease_ends_us"`
}

// DemandText is the share's demand as the table shows it: "—" when not
// known yet.
func (s RLQSShare) DemandText() string { return orDash(s.Demand, oneDecimal) }

// DemandText is the budget's demand with one decimal.
func (b RLQSBudget) DemandText() string { return oneDecimal(b.Demand) }

func oneDecimal(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// rlqsView is Options.RLQS's view, its lists at most c.topN long; nil
// without it.
func (c *Console) rlqsView() *RLQS {
	if c.rlqs == nil {
		return nil
	}
	v := c.rlqs(c.topN)
	if v == nil {
		return nil
	}
	v.MaxBytes = c.lim.ViewBytes
	v.Top = append([]RLQSBudget{}, v.Top[:min(len(v.Top), c.topN)]...)
	for i := range v.Top {
		b := &v.Top[i]
		b.Shares = append([]RLQSShare{}, b.Shares[:min(len(b.Shares), c.topN)]...)
	}
	return v
}

// serveRLQS answers GET /console/api/rlqs: the RLQS view, or 404 when
// the service shares no budgets (serve without --rlqs).
func (c *Console) serveRLQS(w http.ResponseWriter, _ *http.Request) {
	v := c.rlqsView()
	if v == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "RLQS is off: run sluice serve with --rlqs (docs/rlqs.md)"})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
