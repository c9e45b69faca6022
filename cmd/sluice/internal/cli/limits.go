package cli

import (
	"strings"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// limitsFlag is serve's --limit: NAME=VALUE pairs of the limits table.
type limitsFlag struct{ t *limits.Table }

func (f limitsFlag) String() string { return "" }

func (f limitsFlag) Set(s string) error { return f.t.SetAll(s) }

// limitFlag is an older flag of one row of the table (--max-entries).
type limitFlag struct {
	t   *limits.Table
	row *limits.Row
}

func (f limitFlag) String() string {
	if f.t == nil {
		return ""
	}
	return f.row.Format(f.row.Default)
}

func (f limitFlag) Set(s string) error { return f.t.Set(f.row, s) }

// limitNames lists the table's rows for --limit's help.
func limitNames() string {
	s := make([]string, len(limits.Rows))
	for i, r := range limits.Rows {
		s[i] = r.Name
	}
	return strings.Join(s, ", ")
}
