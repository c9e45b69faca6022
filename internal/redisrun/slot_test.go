package redisrun

import "testing"

// Slot agrees with Redis Cluster's key-to-slot mapping (CLUSTER KEYSLOT):
// CRC16 of the key, or of its first non-empty {hash tag}.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"foo":                  12182,
		"123456789":            12739,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"bar":                  5061,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
