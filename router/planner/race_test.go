//go:build race

package planner

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts of Plan are not meaningful.
const raceEnabled = true
