//go:build race

package rlsconfig

const raceEnabled = true
