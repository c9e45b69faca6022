package sim

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// The figure's colors.
const (
	colAdmit   = "#2f9e44"
	colDelay   = "#f08c00"
	colDeny    = "#e03131"
	colError   = "#862e9c"
	colArrive  = "#868e96"
	colText    = "#212529"
	colMuted   = "#5c636a"
	colGrid    = "#e9ecef"
	colAxis    = "#adb5bd"
	fontFamily = "Helvetica, Arial, 'DejaVu Sans', sans-serif"
)

// WriteSVG writes res as a self-contained SVG figure: a title, the arrivals
// per tick as grey bars, then one row per algorithm with its admitted units
// (green) and delayed units (amber, in the tick they leave) stacked above a
// baseline and its denied units (red) below it, a legend, and an axis in ticks
// and time. Each algorithm's row is a <g class="algorithm"> element.
func WriteSVG(w io.Writer, res *Result) error {
	bw := bufio.NewWriter(w)
	f := newFigure(res)
	f.write(bw)
	return bw.Flush()
}

type figure struct {
	res *Result
	n   int

	cw     float64 // one tick's width
	u      float64 // one unit's height
	left   float64 // the plot's left edge
	width  float64 // the whole figure's
	upArr  int64   // the most arrivals in a tick
	upAlg  int64   // the most admitted + delayed in a tick, over the algorithms
	downMx int64   // the most denied + errors in a tick
	errors bool    // whether some request could never pass
}

const (
	pad      = 24.0
	captionH = 20.0 // a row's caption above its bars
	rowGap   = 16.0
	barFrac  = 0.68 // a bar's share of its tick's width
	plotW    = 780.0
)

func newFigure(res *Result) *figure {
	n := res.Config.Ticks
	f := &figure{res: res, n: n, left: pad + 44}
	f.cw = min(130, max(4, plotW/float64(n)))
	f.upArr = max(1, maxOf(res.Arrivals))
	for _, r := range res.Rows {
		for i := range n {
			f.upAlg = max(f.upAlg, r.Admitted[i]+r.Delayed[i])
		}
		for i := range n {
			f.downMx = max(f.downMx, r.Denied[i]+r.Errors[i])
		}
		f.errors = f.errors || r.Totals.Errors > 0
	}
	f.upAlg = max(f.upAlg, 1)
	f.u = min(7, max(0.05, 54/float64(max(f.upArr, f.upAlg+f.downMx))))
	f.width = f.left + float64(n)*f.cw + pad
	f.width = max(f.width, f.left+plotW+pad)
	return f
}

func (f *figure) x(i int) float64 { return f.left + float64(i)*f.cw }

func (f *figure) write(w *bufio.Writer) {
	res, cfg := f.res, f.res.Config
	l := cfg.Limit
	var body strings.Builder
	y := pad

	// Title and what the figure shows.
	y += 18
	fmt.Fprintf(&body, `<text x="%g" y="%g" font-size="19" font-weight="bold" fill="%s">%s</text>`+"\n",
		pad, y, colText, esc("What each rate-limiting algorithm admits, delays and denies"))
	y += 20
	src := cfg.Source
	if src == "" {
		src = fmt.Sprintf("%d requests", res.Requests)
	}
	fmt.Fprintf(&body, `<text x="%g" y="%g" font-size="12.5" fill="%s">%s</text>`+"\n", pad, y, colMuted,
		esc(fmt.Sprintf("Limit %d/%s (%s per tick), burst %d; windows %d per %s. Arrivals: %s.",
			l.Rate, fmtDur(l.Period.Microseconds()), perTick(res), l.Burst,
			res.WindowRate, fmtDur(cfg.Window.Microseconds()), src)))
	y += 17
	note := fmt.Sprintf("Each bar counts the %s in one %s tick; each algorithm has a key of its own.",
		unitWord(res), fmtDur(cfg.Tick.Microseconds()))
	if res.Keys > 1 {
		note = fmt.Sprintf("Each bar counts the %s in one %s tick, summed over %d keys each limited on its own.",
			unitWord(res), fmtDur(cfg.Tick.Microseconds()), res.Keys)
	}
	if res.Omitted > 0 {
		note += fmt.Sprintf(" Not shown: %d requests after tick %d.", res.Omitted, f.n-1)
	}
	fmt.Fprintf(&body, `<text x="%g" y="%g" font-size="12.5" fill="%s">%s</text>`+"\n", pad, y, colMuted, esc(note))

	// Legend.
	y += 22
	y = f.legend(&body, y) + 22

	// The tick grid behind the rows, drawn once the rows' extent is known.
	top := y
	var rows strings.Builder
	y = f.arrivalRow(&rows, y)
	for _, r := range res.Rows {
		y = f.algorithmRow(&rows, r, y)
	}
	bottom := y - rowGap + 6
	fmt.Fprintf(&body, `<g class="grid" stroke="%s" stroke-width="1">`+"\n", colGrid)
	for i := 0; i <= f.n; i++ {
		if i%f.step() == 0 || i == f.n {
			fmt.Fprintf(&body, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", f.x(i), top, f.x(i), bottom)
		}
	}
	body.WriteString("</g>\n")
	body.WriteString(rows.String())
	y = f.axis(&body, bottom)

	height := y + pad
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="%s">`+"\n",
		f.width, height, f.width, height, fontFamily)
	fmt.Fprintf(w, "<title>%s</title>\n", esc(fmt.Sprintf("sluice sim: limit %d/%s, burst %d, %d ticks of %s",
		l.Rate, fmtDur(l.Period.Microseconds()), l.Burst, f.n, fmtDur(cfg.Tick.Microseconds()))))
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	w.WriteString(body.String())
	w.WriteString("</svg>\n")
}

// step is the spacing, in ticks, of the grid lines and axis labels.
func (f *figure) step() int {
	for _, s := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000} {
		if float64(s)*f.cw >= 60 {
			return s
		}
	}
	return 10000
}

// legend draws the colors' meanings from y on and returns the y of its last
// line.
func (f *figure) legend(b *strings.Builder, y float64) float64 {
	items := []struct{ color, label string }{
		{colArrive, "arrived"},
		{colAdmit, "admitted at once"},
		{colDelay, "admitted after a wait, drawn when it leaves"},
		{colDeny, "denied, drawn below the line"},
	}
	if f.errors {
		items = append(items, struct{ color, label string }{colError, "error: cost over capacity"})
	}
	x := pad
	b.WriteString(`<g class="legend" font-size="12">` + "\n")
	for _, it := range items {
		if w := 17 + textWidth(it.label, 12); x > pad && x+w > f.width-pad {
			x, y = pad, y+18
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" rx="2" fill="%s"/>`, x, y-10, it.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x+17, y, colText, esc(it.label))
		x += 17 + textWidth(it.label, 12) + 20
	}
	b.WriteString("</g>\n")
	return y
}

// textWidth estimates the width of s in a sans-serif font of size px: Arial's
// widths, roughly, made a little wider for the wider fonts (DejaVu Sans).
func textWidth(s string, px float64) float64 {
	em := 0.0
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijl.,:;'|!", r):
			em += 0.25
		case strings.ContainsRune("ftr ()[]-/", r):
			em += 0.33
		case r == 'm' || r == 'w':
			em += 0.85
		case r == 'M' || r == 'W':
			em += 0.9
		case r >= 'A' && r <= 'Z':
			em += 0.68
		default:
			em += 0.556
		}
	}
	return em * px * 1.08
}

func (f *figure) caption(b *strings.Builder, y float64, name, about, totals string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13.5" fill="%s"><tspan font-weight="bold">%s</tspan><tspan fill="%s" font-size="12" dx="8">%s</tspan></text>`+"\n",
		f.left, y, colText, esc(name), colMuted, esc(about))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="end">%s</text>`+"\n",
		f.width-pad, y, colMuted, esc(totals))
}

func (f *figure) arrivalRow(b *strings.Builder, y float64) float64 {
	res := f.res
	var total int64
	for _, a := range res.Arrivals {
		total += a
	}
	b.WriteString(`<g class="arrivals">` + "\n")
	f.caption(b, y+14, "arrivals", "", fmt.Sprintf("%d %s", total, unitWord(res)))
	labels := f.cw >= 12 // room for the counts above the bars
	base := y + captionH + float64(f.upArr)*f.u
	if labels {
		base += 10
	}
	for i, a := range res.Arrivals {
		if a > 0 {
			f.bar(b, i, base-float64(a)*f.u, float64(a)*f.u, colArrive, fmt.Sprintf("%s: %d arrived", f.tickName(i), a))
			if labels {
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s" text-anchor="middle">%d</text>`+"\n",
					f.x(i)+f.cw/2, base-float64(a)*f.u-3, colMuted, a)
			}
		}
	}
	f.baseline(b, base)
	b.WriteString("</g>\n")
	return base + rowGap + 4
}

func (f *figure) algorithmRow(b *strings.Builder, r Row, y float64) float64 {
	x := r.Totals
	totals := fmt.Sprintf("%d admitted, %d denied", x.Admitted, x.Denied)
	if x.Delayed > 0 {
		totals = fmt.Sprintf("%d admitted (%d waited, up to %s), %d denied",
			x.Admitted, x.Delayed, fmtDur(x.MaxDelay), x.Denied)
	}
	if x.Errors > 0 {
		totals += fmt.Sprintf(", %d errors", x.Errors)
	}
	fmt.Fprintf(b, `<g class="algorithm" id="row-%s">`+"\n", r.Kind())
	f.caption(b, y+14, r.Kind().String(), r.About, totals)
	base := y + captionH + float64(f.upAlg)*f.u
	for i := range f.n {
		a, d, n, e := r.Admitted[i], r.Delayed[i], r.Denied[i], r.Errors[i]
		tn := f.tickName(i)
		if a > 0 {
			f.bar(b, i, base-float64(a)*f.u, float64(a)*f.u, colAdmit, fmt.Sprintf("%s: %d admitted", tn, a))
		}
		if d > 0 {
			f.bar(b, i, base-float64(a+d)*f.u, float64(d)*f.u, colDelay, fmt.Sprintf("%s: %d left after a wait", tn, d))
		}
		if n > 0 {
			f.bar(b, i, base, float64(n)*f.u, colDeny, fmt.Sprintf("%s: %d denied", tn, n))
		}
		if e > 0 {
			f.bar(b, i, base+float64(n)*f.u, float64(e)*f.u, colError, fmt.Sprintf("%s: %d could never pass (cost over capacity)", tn, e))
		}
	}
	f.baseline(b, base)
	// The scale, at the left: passed above, denied below.
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s" text-anchor="end">0</text>`+"\n",
		f.left-6, base+3.5, colMuted)
	if float64(f.upAlg)*f.u >= 14 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s" text-anchor="end">%d</text>`+"\n",
			f.left-6, base-float64(f.upAlg)*f.u+4, colMuted, f.upAlg)
	}
	if float64(f.downMx)*f.u >= 14 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s" text-anchor="end">%d</text>`+"\n",
			f.left-6, base+float64(f.downMx)*f.u+3, colMuted, f.downMx)
	}
	b.WriteString("</g>\n")
	return base + float64(f.downMx)*f.u + rowGap
}

func (f *figure) tickName(i int) string {
	return fmt.Sprintf("tick %d (%s)", i, fmtDur(int64(i)*f.res.Config.Tick.Microseconds()))
}

func (f *figure) bar(b *strings.Builder, i int, y, h float64, color, title string) {
	bw := f.cw * barFrac
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
		f.x(i)+(f.cw-bw)/2, y, bw, h, color, esc(title))
}

func (f *figure) baseline(b *strings.Builder, y float64) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n",
		f.x(0), y, f.x(f.n), y, colAxis)
}

// axis draws the tick numbers and times under the rows and returns the y below
// them.
func (f *figure) axis(b *strings.Builder, y float64) float64 {
	tick := f.res.Config.Tick.Microseconds()
	step := f.step()
	b.WriteString(`<g class="axis" font-size="11">` + "\n")
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", f.x(0), y, f.x(f.n), y, colAxis)
	for i := 0; i <= f.n; i++ {
		h := 3.0
		if i%step == 0 {
			h = 6
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", f.x(i), y, f.x(i), y+h, colAxis)
	}
	for i := 0; i < f.n; i += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="middle">%d</text>`+"\n", f.x(i)+f.cw/2, y+18, colText, i)
	}
	for i := 0; i <= f.n; i += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="middle">%s</text>`+"\n", f.x(i), y+34, colMuted, esc(fmtDur(int64(i)*tick)))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="end">tick</text>`+"\n", f.left-16, y+18, colText)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="end">time</text>`+"\n", f.left-16, y+34, colMuted)
	b.WriteString("</g>\n")
	return y + 38
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			if r < 0x20 && r != '\t' && r != '\n' || r == 0xFFFD || r >= 0xD800 && r < 0xE000 {
				b.WriteRune('?')
			} else {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}
