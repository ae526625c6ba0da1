package sidecar

import (
	"testing"

	"github.com/tesseradb/tessera/pgmanager"
)

// TestIsolationKeepsOtherClosings: closing the gate for isolation and
// lifting it never opens a gate that an operation or a deposition
// closed, an operation opening the gate while the sidecar is cut off
// leaves it closed, and a state read on reaching the topology service
// again that names another primary keeps the gate closed past the
// isolation's end.
func TestIsolationKeepsOtherClosings(t *testing.T) {
	g := newFenceGate()
	g.recordedState(recordedPrimary{"self", 1}, false, 10)
	g.observed(g.generation(), pgmanager.Status{Running: true, Role: pgmanager.RolePrimary})
	check := func(step string, closed, onlyIsolated bool) {
		t.Helper()
		if g.closed.Load() != closed || g.onlyIsolated() != onlyIsolated {
			t.Fatalf("%s: closed %v, closed for isolation alone %v; want %v, %v", step, g.closed.Load(), g.onlyIsolated(), closed, onlyIsolated)
		}
	}
	check("a recorded primary", false, false)

	g.isolate()
	check("cut off", true, true)
	g.set(false) // Unfence while cut off
	check("Unfence while cut off", true, true)
	g.probedState(recordedPrimary{"self", 1}, false, 10, true)
	check("back", false, false)

	g.set(true) // Fence
	g.isolate()
	check("fenced and cut off", true, false)
	g.probedState(recordedPrimary{"self", 1}, false, 10, true)
	check("fenced and back", true, false)
	g.set(false)
	check("unfenced", false, false)

	g.isolate()
	if prev, changed := g.probedState(recordedPrimary{"other", 2}, true, 11, true); !changed || prev.primary != "self" {
		t.Fatalf("a newer state read by a probe: changed %v, previous primary %q", changed, prev.primary)
	}
	check("deposed while cut off, and back", true, false)
	if _, changed := g.probedState(recordedPrimary{"self", 1}, false, 9, false); changed || !g.deposed {
		t.Fatal("an older state read by a probe was noted")
	}
	// Postgres still runs as a primary: the deposition holds.
	g.observed(g.generation(), pgmanager.Status{Running: true, Role: pgmanager.RolePrimary})
	check("deposed, observed as a primary", true, false)
	// A replica (rewound since) is no longer deposed: reopened.
	g.observed(g.generation(), pgmanager.Status{Running: true, Role: pgmanager.RoleReplica})
	check("rewound into a replica", false, false)
}
