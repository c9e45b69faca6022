package sluice

// Paths reports which of its paths l found for its store: the engine of a
// store of this module, and memstore's local path.
func Paths(l *Limiter) (linked, local bool) {
	_, out := l.eng.(outside)
	return l.eng != nil && !out, l.local != nil
}
