package model

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
)

// TakeReserving decides a request of cost units for key at now for a class
// that must leave reserve units for higher classes (SEMANTICS.md,
// "Reserved capacity"): it passes only if cost + reserve units would pass
// at now, and then spends only cost; refused, it reports that request's
// refusal and changes nothing. Remaining is the class's: less reserve, at
// least 0. It panics when cost + reserve is over the capacity.
func (m *Model) TakeReserving(key string, now, cost, reserve int64) algo.Decision {
	if reserve < 0 || cost+reserve > m.Capacity() {
		panic(fmt.Sprintf("model: cost %d with reserve %d over the capacity %d", cost, reserve, m.Capacity()))
	}
	var d algo.Decision
	if cost == 0 || reserve == 0 {
		d = m.Take(key, now, cost)
	} else {
		saved, had := m.keys[key]
		if had {
			saved = saved.clone()
		}
		d = m.Take(key, now, cost+reserve)
		if had {
			m.keys[key] = saved
		} else {
			delete(m.keys, key)
		}
		if d.Allowed {
			d = m.Take(key, now, cost)
		}
	}
	d.Remaining = max(0, d.Remaining-reserve)
	return d
}
