//go:build race

package router_test

// raceEnabled: the race detector's shadow memory is part of the process's
// resident set, which then says nothing of the router's own.
const raceEnabled = true
