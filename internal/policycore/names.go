package policycore

import "fmt"

// MaxNameLen is the longest policy name, in bytes.
const MaxNameLen = 64

// CheckName reports why n cannot name a policy, or nil: a name is 1 to
// MaxNameLen printable ASCII characters, without '"', '\' or ':'. The
// first two keep it an RFC 9651 String as it is; ':' ends the name in a
// store key (KeyPrefix).
func CheckName(n string) error {
	if n == "" || len(n) > MaxNameLen {
		return fmt.Errorf("name %q: want 1 to %d characters", n, MaxNameLen)
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ':' {
			return fmt.Errorf("name %q: only printable ASCII, without '\"', '\\' or ':'", n)
		}
	}
	return nil
}
