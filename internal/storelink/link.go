// Package storelink is the link between the root package's Limiter and the
// stores of this module: the checks that make a store.Op and the errors
// they wrap, the conversions between the contract's types (package store)
// and the steps' (internal/algo), and the clocks.
//
// This package cannot import the root (the root imports it), so where the
// root's types must cross, they do so by their fields (Result, Clock,
// Checked).
package storelink
