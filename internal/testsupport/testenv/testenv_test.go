package testenv

import (
	"testing"
)

func TestSeed(t *testing.T) {
	t.Setenv(SeedEnv, "")
	if got := SeedOr(t, 42); got != 42 {
		t.Errorf("SeedOr(42) without %s = %d", SeedEnv, got)
	}
	t.Setenv(SeedEnv, "0x10")
	if got := Seed(t); got != 16 {
		t.Errorf("Seed with %s=0x10 = %d", SeedEnv, got)
	}
	if got := SeedOr(t, 42); got != 16 {
		t.Errorf("SeedOr(42) with %s=0x10 = %d", SeedEnv, got)
	}
}

func TestTiming(t *testing.T) {
	t.Setenv(TimingEnv, "")
	if Timing(t, "x") {
		t.Error("Timing without the variable")
	}
	t.Setenv(TimingEnv, "1")
	if !Timing(t, "x") {
		t.Error("no Timing with the variable at 1")
	}
}
