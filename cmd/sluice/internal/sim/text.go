package sim

import (
	"bufio"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"text/tabwriter"
)

// TextOptions controls WriteText.
type TextOptions struct {
	// Color draws counts with ANSI colors: admitted green, delayed yellow,
	// denied red, zeros dim.
	Color bool
}

const (
	ansiReset   = "\x1b[0m"
	ansiBold    = "\x1b[1m"
	ansiDim     = "\x1b[2m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiRed     = "\x1b[31m"
	ansiMagenta = "\x1b[35m"
)

// nameW and tagW are the widths of the label columns: the algorithm's name
// and the row's kind (admit, delay, deny).
const (
	nameW = 14
	tagW  = 5
)

// WriteText writes res as terminal rows: a header saying how each algorithm is
// configured, the arrivals per tick, for each algorithm its admitted, delayed
// (only where some are) and denied units per tick, then a line of totals per
// algorithm and a legend. Thirty ticks fit in 110 columns; the text is ASCII
// but for the colors' escape codes.
func WriteText(w io.Writer, res *Result, opt TextOptions) error {
	bw := bufio.NewWriter(w)
	tw := textWriter{w: bw, color: opt.Color}
	tw.header(res)
	tw.grid(res)
	tw.totals(res)
	tw.legend(res)
	return bw.Flush()
}

type textWriter struct {
	w     *bufio.Writer
	color bool
}

func (t textWriter) paint(code, s string) string {
	if !t.color || code == "" {
		return s
	}
	return code + s + ansiReset
}

func (t textWriter) header(res *Result) {
	cfg := res.Config
	l := cfg.Limit
	fmt.Fprintf(t.w, "%s one trace through each of the seven algorithms, %d ticks of %s\n",
		t.paint(ansiBold, "sluice sim:"), cfg.Ticks, fmtDur(cfg.Tick.Microseconds()))
	fmt.Fprintf(t.w, "limit %d/%s (%s per tick), burst %d; each algorithm has its own key and is set up as:\n",
		l.Rate, fmtDur(l.Period.Microseconds()), perTick(res), l.Burst)
	for _, r := range res.Rows {
		fmt.Fprintf(t.w, "  %-*s  %s\n", nameW, r.Kind(), r.About)
	}
	fmt.Fprintf(t.w, "  (the windows admit %d per %s: the same long-run rate as %d/%s)\n",
		res.WindowRate, fmtDur(cfg.Window.Microseconds()), l.Rate, fmtDur(l.Period.Microseconds()))
	src := cfg.Source
	if src == "" {
		src = fmt.Sprintf("%d requests", res.Requests)
	}
	fmt.Fprintf(t.w, "arrivals: %s\n", src)
	if res.Keys > 1 {
		fmt.Fprintf(t.w, "  %d keys, each limited on its own; the counts are summed over them\n", res.Keys)
	}
	if res.Units {
		fmt.Fprint(t.w, "  some costs are not 1: the counts are units (the sum of costs), not requests\n")
	}
	fmt.Fprintln(t.w)
}

// perTick formats the limit's rate per tick: "1", "0.5", "~0.333".
func perTick(res *Result) string {
	l := res.Config.Limit
	r := new(big.Rat).SetFrac(
		new(big.Int).Mul(big.NewInt(l.Rate), big.NewInt(res.Config.Tick.Microseconds())),
		big.NewInt(l.Period.Microseconds()))
	if r.IsInt() {
		return r.Num().String()
	}
	s := strings.TrimRight(strings.TrimRight(r.FloatString(3), "0"), ".")
	if f, _ := new(big.Rat).SetString(s); f == nil || f.Cmp(r) != 0 {
		s = "~" + s
	}
	return s
}

func (t textWriter) grid(res *Result) {
	n := res.Config.Ticks
	top := maxOf(res.Arrivals)
	for _, r := range res.Rows {
		top = max(top, maxOf(r.Admitted), maxOf(r.Delayed), maxOf(r.Denied), maxOf(r.Errors))
	}
	cw := max(3, len(strconv.FormatInt(top, 10))+1, len(strconv.Itoa(n-1))+1)
	label := func(name, tag string) string {
		return fmt.Sprintf("%-*s %-*s", nameW, name, tagW, tag)
	}

	// The axis: every tick's number, and the time at a readable step.
	var b strings.Builder
	b.WriteString(label("", "tick"))
	for i := range n {
		fmt.Fprintf(&b, "%*d", cw, i)
	}
	fmt.Fprintln(t.w, t.paint(ansiDim, b.String()))
	b.Reset()
	b.WriteString(label("", "time"))
	tick := res.Config.Tick.Microseconds()
	step := labelStep(n, cw, tick)
	col := 0 // columns written after the label
	for i := 0; i < n; i += step {
		s := fmtDur(int64(i) * tick)
		pos := i*cw + cw - 1 // under the tick number's last digit
		if pos < col {
			continue
		}
		b.WriteString(strings.Repeat(" ", pos-col))
		b.WriteString(s)
		col = pos + len(s)
	}
	fmt.Fprintln(t.w, t.paint(ansiDim, b.String()))

	cells := func(counts []int64, code string) string {
		var b strings.Builder
		for _, c := range counts {
			if c == 0 {
				b.WriteString(strings.Repeat(" ", cw-1) + t.paint(ansiDim, "."))
				continue
			}
			s := strconv.FormatInt(c, 10)
			b.WriteString(strings.Repeat(" ", cw-len(s)) + t.paint(code, s))
		}
		return b.String()
	}
	fmt.Fprintf(t.w, "%s%s\n\n", t.paint(ansiBold, label("arrivals", "")), cells(res.Arrivals, ansiBold))
	for _, r := range res.Rows {
		name := r.Kind().String()
		line := func(name, tag, code string, counts []int64) {
			fmt.Fprintf(t.w, "%-*s %s%s%s\n", nameW, name, t.paint(code, tag), strings.Repeat(" ", tagW-len(tag)), cells(counts, code))
		}
		line(name, "admit", ansiGreen, r.Admitted)
		if r.Totals.Delayed > 0 {
			line("", "delay", ansiYellow, r.Delayed)
		}
		line("", "deny", ansiRed, r.Denied)
		if r.Totals.Errors > 0 {
			line("", "error", ansiMagenta, r.Errors)
		}
	}
	if res.Omitted > 0 {
		fmt.Fprintf(t.w, "\n%d requests outside the ticks not shown: the arrivals span %d ticks (see --ticks, --tick)\n", res.Omitted, res.Span)
	}
	fmt.Fprintln(t.w)
}

// labelStep is the step, in ticks, between time labels: the smallest of
// 1, 2, 5, 10, 20, 50, ... that leaves room for the longest label, and at
// least 12 columns between labels.
func labelStep(n, cw int, tick int64) int {
	long := len(fmtDur(int64(n) * tick))
	for s := 1; ; s *= 10 {
		for _, m := range []int{1, 2, 5} {
			if st := s * m; st*cw >= max(long+2, 12) || st >= n {
				return st
			}
		}
	}
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func (t textWriter) totals(res *Result) {
	fmt.Fprintf(t.w, "totals over the %d ticks shown (%s):\n", res.Config.Ticks, unitWord(res))
	tw := tabwriter.NewWriter(t.w, 0, 0, 2, ' ', 0)
	for _, r := range res.Rows {
		x := r.Totals
		fmt.Fprintf(tw, "  %s\tadmitted %d\tdenied %d\tdelayed %d\tmax delay %s", r.Kind(), x.Admitted, x.Denied, x.Delayed, fmtDur(x.MaxDelay))
		var notes []string
		if x.Later > 0 {
			notes = append(notes, fmt.Sprintf("%d delayed leave after the last tick", x.Later))
		}
		if x.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%d errors: cost over capacity", x.Errors))
		}
		if len(notes) > 0 {
			fmt.Fprintf(tw, "\t%s", strings.Join(notes, "; "))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(t.w)
}

func unitWord(res *Result) string {
	if res.Units {
		return "units"
	}
	return "requests"
}

func (t textWriter) legend(res *Result) {
	tick := fmtDur(res.Config.Tick.Microseconds())
	fmt.Fprintf(t.w, "one column = one %s tick; %s = none.  %s: passed at once, in its arrival tick.\n",
		tick, t.paint(ansiDim, "."), t.paint(ansiGreen, "admit"))
	fmt.Fprintf(t.w, "%s: admitted, but waited its turn (leaky-bucket); counted in the tick it leaves.  %s: refused.\n",
		t.paint(ansiYellow, "delay"), t.paint(ansiRed, "deny"))
	for _, r := range res.Rows {
		if r.Totals.Errors > 0 {
			fmt.Fprintf(t.w, "%s: a cost over the algorithm's capacity, which could never pass (not a denial).\n", t.paint(ansiMagenta, "error"))
			break
		}
	}
}
