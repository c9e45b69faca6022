package policycore_test

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/policycore"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "per-ip", "tenant all", "50%", "~!#$&'()*+,-./;<=>?@[]^_`{|}", strings.Repeat("x", 64)} {
		if err := policycore.CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "tenant:all", ":", "a:", `a"b`, `a\b`, "a\tb", "café", "a\x7f"} {
		if err := policycore.CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}
