package model

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
)

// TakeHeadroom decides a request of cost units for key at now for a class
// that must leave headroom units for higher classes (SEMANTICS.md,
// "Headroom"): it passes only if cost + headroom units would pass
// at now, and then spends only cost; refused, it reports that request's
// refusal and changes nothing. Remaining is the class's: less headroom, at
// least 0 (a debt, negative, stays as it is). It panics when cost + headroom is over the capacity.
func (m *Model) TakeHeadroom(key string, now, cost, headroom int64) algo.Decision {
	if headroom < 0 || cost+headroom > m.Capacity() {
		panic(fmt.Sprintf("model: cost %d with headroom %d over the capacity %d", cost, headroom, m.Capacity()))
	}
	var d algo.Decision
	if cost == 0 || headroom == 0 {
		d = m.Take(key, now, cost)
	} else {
		saved, had := m.keys[key]
		if had {
			saved = saved.clone()
		}
		d = m.Take(key, now, cost+headroom)
		if had {
			m.keys[key] = saved
		} else {
			delete(m.keys, key)
		}
		if d.Allowed {
			d = m.Take(key, now, cost)
		}
	}
	if d.Remaining >= 0 { // a debt is the key's, whatever the class
		d.Remaining = max(0, d.Remaining-headroom)
	}
	return d
}
