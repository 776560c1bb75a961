//go:build race

package faults

// raceEnabled says whether the race detector is on, for the table's header.
const raceEnabled = true
