package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
)

func TestWriteText(t *testing.T) {
	res := runDefault(t)
	var b bytes.Buffer
	if err := WriteText(&b, res, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := []string{
		"               tick   0  1  2  3  4  5  6  7  8  9 10 11 12",
		"               time   0s             500ms          1s             1.5s",
		"arrivals              .  .  .  .  8  2  2  2  2  2  2  2  2  2",
		"token-bucket   admit  .  .  .  .  4  1  1  1  1  1  1  1  1  1",
		"               deny   .  .  .  .  4  1  1  1  1  1  1  1  1  1",
		"gcra           admit  .  .  .  .  4  1  1  1",
		"leaky-bucket   admit  .  .  .  .  1  .  .  .  .  .  .  .",
		"               delay  .  .  .  .  .  1  1  1  1  1  1  1",
		"               deny   .  .  .  .  3  1  1  1  1  1  1  1",
		"fixed-window   admit  .  .  .  .  4  .  .  .  2  2  .  .  2  2  .  .",
		"               deny   .  .  .  .  4  2  2  2  .  .  2  2  .  .  2  2",
		"sliding-window admit  .  .  .  .  4  .  .  .  .  1  1  1  1  1  .  1",
		"sliding-log    admit  .  .  .  .  4  .  .  .  2  2  .  .  2  2  .  .",
		"  token-bucket    admitted 29  denied 29  delayed 0   max delay 0s",
		"  leaky-bucket    admitted 30  denied 28  delayed 29  max delay 400ms  4 delayed leave after the last tick",
		"  sliding-window  admitted 21  denied 37  delayed 0   max delay 0s",
		"limit 10/1s (1 per tick), burst 4",
		"  leaky-bucket    queue: 1 leaves per 100ms, 4 may wait",
		"the windows admit 4 per 400ms",
		"arrivals: " + DefaultSource,
	}
	for _, r := range rows {
		if !strings.Contains(out, r) {
			t.Errorf("output lacks %q:\n%s", r, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("escape codes without Color")
	}
	if strings.Contains(out, "error") {
		t.Error("an error row with no errors")
	}
	for i, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 110 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d has trailing spaces: %q", i+1, line)
		}
		for _, r := range line {
			if r > 0x7e {
				t.Errorf("line %d is not ASCII: %q", i+1, line)
				break
			}
		}
	}
	// Only leaky-bucket delays: one delay row.
	if n := strings.Count(out, "  delay  "); n != 1 {
		t.Errorf("%d delay rows, want 1", n)
	}

	b.Reset()
	if err := WriteText(&b, res, TextOptions{Color: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ansiGreen + "4" + ansiReset, ansiYellow + "1" + ansiReset, ansiRed + "3" + ansiReset} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("colored output lacks %q", s)
		}
	}
}

func TestWriteTextErrorsAndOmitted(t *testing.T) {
	cfg := defaultConfig()
	cfg.Ticks, cfg.Start, cfg.Source = 2, 0, ""
	res, err := Run(cfg, []Arrival{{T: 1000, Key: "a", Cost: 9}, {T: 2000, Key: "b", Cost: 1}, {T: 900_000, Key: "a", Cost: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteText(&b, res, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"               error  9  .",
		"9 errors: cost over capacity",
		"1 requests outside the ticks not shown",
		"arrivals: 2 requests",
		"2 keys, each limited on its own",
		"the counts are units",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, b.String())
		}
	}
}

func TestWriteSVG(t *testing.T) {
	res := runDefault(t)
	var b bytes.Buffer
	if err := WriteSVG(&b, res); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	var (
		stack    []string
		rows     []string // the algorithm groups' ids, in order
		rects    = map[string]int{}
		texts    []string
		arrivals int
		root     xml.StartElement
	)
	inRow := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				root = tok
			}
			stack = append(stack, tok.Name.Local)
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch {
			case tok.Name.Local == "g" && attr("class") == "algorithm":
				if inRow != "" {
					t.Errorf("row %s nested in %s", attr("id"), inRow)
				}
				inRow = attr("id")
				rows = append(rows, inRow)
			case tok.Name.Local == "g" && attr("class") == "arrivals":
				arrivals++
			case tok.Name.Local == "rect" && inRow != "":
				rects[inRow+" "+attr("fill")]++
			case tok.Name.Local == "image" || attr("href") != "":
				t.Errorf("external asset: <%s>", tok.Name.Local)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			if tok.Name.Local == "g" && inRow != "" && len(stack) == 1 {
				inRow = ""
			}
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] != "svg" && stack[len(stack)-1] != "g" {
				texts = append(texts, string(tok))
			}
		}
	}
	if root.Name.Local != "svg" || root.Name.Space != "http://www.w3.org/2000/svg" {
		t.Errorf("root element %v", root.Name)
	}
	var want []string
	for _, k := range algo.Kinds() {
		want = append(want, "row-"+k.String())
	}
	if strings.Join(rows, ",") != strings.Join(want, ",") {
		t.Errorf("algorithm rows %v, want %v", rows, want)
	}
	if arrivals != 1 {
		t.Errorf("%d arrival groups, want 1", arrivals)
	}
	// Bars: token-bucket admits in 26 ticks and denies in 26; leaky-bucket
	// admits at once in 1, leaves after a wait in 25, denies in 26;
	// fixed-window admits in tick 4 and in 6 pairs of ticks from tick 8.
	for k, n := range map[string]int{
		"row-token-bucket " + colAdmit: 26, "row-token-bucket " + colDeny: 26, "row-token-bucket " + colDelay: 0,
		"row-leaky-bucket " + colAdmit: 1, "row-leaky-bucket " + colDelay: 25, "row-leaky-bucket " + colDeny: 26,
		"row-fixed-window " + colAdmit: 13,
	} {
		if rects[k] != n {
			t.Errorf("%s: %d bars, want %d", k, rects[k], n)
		}
	}
	all := strings.Join(texts, "|")
	for _, s := range []string{
		"token-bucket", "sliding-log", "admitted at once", "denied", "tick", "time", "500ms", "1.5s",
		"29 admitted, 29 denied", "30 admitted (29 waited, up to 400ms), 28 denied",
		"Limit 10/1s (1 per tick), burst 4; windows 4 per 400ms.",
	} {
		if !strings.Contains(all, s) {
			t.Errorf("figure lacks the text %q", s)
		}
	}
	if !strings.Contains(svg, "sans-serif") {
		t.Error("no sans-serif font")
	}
}

func TestEsc(t *testing.T) {
	if got := esc(`a<b & "c" 'd'` + "\x01"); got != "a&lt;b &amp; &quot;c&quot; &apos;d&apos;?" {
		t.Errorf("esc = %q", got)
	}
}
