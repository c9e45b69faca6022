package cli

import (
	"flag"
	"strings"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// limitsFlag is serve's --limit: NAME=VALUE pairs of the limits table;
// set records the rows it set.
type limitsFlag struct {
	t   *limits.Table
	set map[*limits.Row]bool
}

func (f limitsFlag) String() string { return "" }

func (f limitsFlag) Set(s string) error {
	if err := f.t.SetAll(s); err != nil {
		return err
	}
	for _, kv := range strings.Split(s, ",") {
		name, _, _ := strings.Cut(kv, "=")
		if r := limits.Lookup(strings.TrimSpace(name)); r != nil && f.set != nil {
			f.set[r] = true
		}
	}
	return nil
}

// limitGiven reports whether the command line set r, with --limit or its
// older flag.
func limitGiven(fs *flag.FlagSet, r *limits.Row) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		lf, ok := f.Value.(limitsFlag)
		given = given || (r.Alias != "" && f.Name == r.Alias) || (ok && lf.set[r])
	})
	return given
}

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
