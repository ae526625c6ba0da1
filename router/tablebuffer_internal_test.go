package router

import (
	"testing"
	"time"

	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo/store"
)

func tableStmt(db, schema, table string) []*plannedStmt {
	return []*plannedStmt{{Tables: []planner.TableName{{Database: db, Schema: schema, Table: table}}}}
}

// TestTableBufferClock: a table buffer holds its tables, in its database
// only, for For from when this router first saw it, whatever the
// setter's clock said; set again, it starts anew; cleared, it ends.
func TestTableBufferClock(t *testing.T) {
	now := time.Now()
	tb := newTableBuffers(func() time.Time { return now })
	orders, other, otherDB := tableStmt("store", "public", "orders"), tableStmt("store", "public", "items"), tableStmt("shop", "public", "orders")
	sig := store.TableBuffer{ID: "reshard-store-data", Database: "store", Tables: []string{"public.orders"}, For: 10 * time.Second,
		Set: now.Add(-time.Hour)} // a setter whose clock is an hour behind
	tb.apply([]store.TableBuffer{sig})
	if tb.covering(orders) == nil {
		t.Fatal("a table buffer does not hold its table")
	}
	if tb.covering(other) != nil || tb.covering(otherDB) != nil {
		t.Fatal("a table buffer holds another table, or its name in another database")
	}
	now = now.Add(9 * time.Second)
	tb.apply([]store.TableBuffer{sig}) // the same signal, listed again
	tb.refresh()
	if tb.covering(orders) == nil {
		t.Fatal("a table buffer let go after 9 s of 10")
	}
	now = now.Add(2 * time.Second)
	tb.refresh() // follow's timer, at the earliest end
	if tb.covering(orders) != nil {
		t.Fatal("a table buffer still held 11 s into 10")
	}
	if tb.active.Load() != nil {
		t.Fatal("no signal is in force, yet checks still look")
	}
	sig.Set = sig.Set.Add(time.Minute) // set again by a retried activity
	tb.apply([]store.TableBuffer{sig})
	if tb.covering(orders) == nil {
		t.Fatal("a table buffer set again does not hold its table")
	}
	tb.apply(nil)
	if tb.covering(orders) != nil || tb.active.Load() != nil {
		t.Fatal("a cleared table buffer still holds")
	}
}

// BenchmarkTableBufferCheck is the cost a table buffer adds to every
// statement: none set (one atomic load), and one set on another table.
func BenchmarkTableBufferCheck(b *testing.B) {
	tb := newTableBuffers(time.Now)
	stmts := tableStmt("store", "public", "orders")
	b.Run("none", func(b *testing.B) {
		for b.Loop() {
			if tb.covering(stmts) != nil {
				b.Fatal("held")
			}
		}
	})
	tb.apply([]store.TableBuffer{{ID: "x", Database: "store", Tables: []string{"public.items"}, For: time.Hour}})
	b.Run("other-table", func(b *testing.B) {
		for b.Loop() {
			if tb.covering(stmts) != nil {
				b.Fatal("held")
			}
		}
	})
}
