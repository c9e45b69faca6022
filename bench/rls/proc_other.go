//go:build !linux

package rls

import (
	"errors"
	"time"
)

// ProcessCPU is not supported off Linux: the CPU columns stay empty.
func ProcessCPU(int) (time.Duration, error) {
	return 0, errors.ErrUnsupported
}
