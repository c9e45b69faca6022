package limits

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Each row's Format reads back through Parse, defaults included.
func TestFormatParse(t *testing.T) {
	for _, r := range Rows {
		for _, v := range []int64{r.Default, 1, r.Default + 1, 3 * r.Default} {
			got, err := r.Parse(r.Format(v))
			if err != nil || got != v {
				t.Errorf("%s: Parse(Format(%d) = %q) = %d, %v", r.Name, v, r.Format(v), got, err)
			}
		}
	}
	for _, c := range []struct {
		row  *Row
		text string
	}{{Lifetime, "0s"}, {Lifetime, "-1h"}, {Lifetime, "1"}, {Rules, "0"}, {Rules, "-3"}, {Rules, "1e3"}, {RequestBytes, "64KB"}, {RequestBytes, "9999999999999999MiB"}, {RLQSWeight, "1048577"}} {
		if _, err := c.row.Parse(c.text); err == nil {
			t.Errorf("%s: Parse(%q) accepted", c.row.Name, c.text)
		}
	}
}

// --limit's list sets rows by name or alias; a bad one says what is wanted.
func TestSetAll(t *testing.T) {
	lt := Defaults()
	if err := lt.SetAll("lifetime=1h, max-entries=8,key-bytes=4KiB"); err != nil {
		t.Fatal(err)
	}
	if lt.Lifetime != time.Hour || lt.Entries != 8 || lt.KeyBytes != 4096 {
		t.Errorf("after SetAll: %+v", lt)
	}
	for _, bad := range []string{"lifetime", "nosuch=3", "rules=x"} {
		err := lt.SetAll(bad)
		if err == nil {
			t.Errorf("SetAll(%q) accepted", bad)
		} else if !strings.Contains(err.Error(), "want") && !strings.Contains(err.Error(), "no such limit") {
			t.Errorf("SetAll(%q): %v, want it to say what is wanted", bad, err)
		}
	}
}

// An input over a cap says what, the cap and the flag that raises it.
func TestExceeded(t *testing.T) {
	lt := Defaults()
	if err := lt.Check(Lifetime, `"lifetime"`, int64(24*time.Hour)); err != nil {
		t.Errorf("the cap itself refused: %v", err)
	}
	err := lt.Check(Lifetime, `"lifetime"`, int64(312500*time.Hour))
	want := `"lifetime": 312500h, over the service's limit lifetime of 24h (--limit lifetime=DURATION raises it)`
	if err == nil || err.Error() != want || !errors.Is(err, ErrExceeded) {
		t.Errorf("got %v, want %s", err, want)
	}
	err = lt.Over(RequestBytes, "request body")
	want = "request body: over the service's limit request-bytes of 64KiB (--limit request-bytes=N raises it)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// FillDefaults keeps what is set and fills the rest.
func TestFillDefaults(t *testing.T) {
	lt := Table{Descriptors: 2}
	lt.FillDefaults()
	if lt.Descriptors != 2 || lt.Entries != Entries.Default || lt.Lifetime != 24*time.Hour {
		t.Errorf("%+v", lt)
	}
}

// docs/serve.md's "Limits" table lists the rows, in order, with their
// defaults and aliases.
func TestDocsTable(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Limits\n")
	if !ok {
		t.Fatal(`docs/serve.md has no "## Limits" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var names []string
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		names = append(names, name)
		r := Lookup(name)
		if r == nil || r.Name != name {
			t.Errorf("docs/serve.md's Limits lists %q, which is no row's name", name)
			continue
		}
		if d := strings.TrimSpace(cells[2]); d != r.Format(r.Default) {
			t.Errorf("%s: docs say default %q, the table %q", name, d, r.Format(r.Default))
		}
		if r.Alias != "" && !strings.Contains(cells[1]+cells[3], "--"+r.Alias) {
			t.Errorf("%s: docs do not name its older flag --%s", name, r.Alias)
		}
	}
	var rows []string
	for _, r := range Rows {
		rows = append(rows, r.Name)
	}
	if strings.Join(names, " ") != strings.Join(rows, " ") {
		t.Errorf("docs/serve.md's Limits lists\n%v\nthe table has\n%v", names, rows)
	}
}

// Every row names the test that sends it its cap + 1, and that test
// exists in the command's module.
func TestRowsTested(t *testing.T) {
	tests := map[string]bool{}
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			tests[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Rows {
		if r.Test == "" || !tests[r.Test] {
			t.Errorf("row %s names the test %q, which is not in cmd/sluice", r.Name, r.Test)
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
