package sluice

// Paths reports which path l found for its store: memstore's, called
// directly, or another's, through the interface.
func Paths(l *Limiter) (local bool) { return l.mem != nil }
