//go:build linux

package fastclock

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// counterStatus reports what the kernel says of the TSC: invariant, the CPU
// advertises constant_tsc (fixed rate whatever the P-state) and nonstop_tsc
// (keeps counting in deep C-states); kernelClock, the kernel's current
// clocksource is tsc, which also means it found the counters synchronized
// across CPUs and has not since marked the TSC unstable.
func counterStatus() (invariant, kernelClock bool) {
	cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	kernelClock = err == nil && strings.TrimSpace(string(cs)) == "tsc"
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return false, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 16<<10), 1<<20)
	for sc.Scan() {
		// Only the first CPU's flags line is read: the kernel reports the
		// TSC flags alike for every CPU, and on a big machine the whole file
		// is large.
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("flags")) {
			continue
		}
		_, list, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return false, false
		}
		var constant, nonstop bool
		for _, fl := range bytes.Fields(list) {
			switch string(fl) {
			case "constant_tsc":
				constant = true
			case "nonstop_tsc":
				nonstop = true
			}
		}
		invariant = constant && nonstop
		return invariant, invariant && kernelClock
	}
	return false, false
}
