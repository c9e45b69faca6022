package sluice

// Paths reports which of its paths l found for its store: the sealed engine
// of a store of this module, and its local engine.
func Paths(l *Limiter) (sealed, local bool) {
	_, out := l.eng.(outside)
	return l.eng != nil && !out, l.local != nil
}
