//go:build linux

package rls

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the user plus system CPU time process pid has used
// (pid 0: this process), from /proc/<pid>/stat: its resolution is 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat
// line. The command name (field 2) is in parentheses and may hold spaces or
// parentheses, so the fields are counted from the last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("rls: /proc stat line without ')': %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field k is f[k-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("rls: /proc stat line with %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("rls: /proc stat: bad CPU time %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}
