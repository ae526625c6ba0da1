package sidecar

import (
	"bytes"
	"context"
	"time"
)

// Statements are shared between sessions by content (doc.go), and
// Postgres keeps a prepared statement's result type fixed: once DDL
// changes what a shared statement returns, its next use on each
// connection fails with 0A000 "cached plan must not change result type",
// even for a session whose client prepared it only now, after the change,
// where one Postgres would have planned it afresh. So the sidecar counts
// schema changes (schemaEpoch), and a connection whose statements were
// prepared before the latest change closes them before its next batch,
// which then prepares what it needs against the new schema. A change is
// counted when DDL run through this sidecar ends its transaction, and
// when one is announced in the topology service (store.SchemaChange:
// another router's DDL, or an OnlineDDL migration, which changes the
// shards directly). A statement used between the change and its count
// still fails once, as before, and is prepared afresh after that.

// ddlTagPrefixes are the CommandComplete tags of statements that may
// change what a prepared statement returns.
var ddlTagPrefixes = [][]byte{[]byte("ALTER "), []byte("DROP "), []byte("CREATE VIEW"), []byte("CREATE RULE")}

func isSchemaChangeTag(tag []byte) bool {
	for _, p := range ddlTagPrefixes {
		if bytes.HasPrefix(tag, p) {
			return true
		}
	}
	return false
}

// SchemaChanges is how many schema changes the sidecar has counted.
func (s *Server) SchemaChanges() uint64 { return s.schemaEpoch.Load() }

// noteSchemaChange counts a schema change.
func (s *Server) noteSchemaChange() { s.schemaEpoch.Add(1) }

// afterBatch counts the schema change b's transaction made once it has
// ended (committed or not: counting one too many only costs a prepare).
func (s *Server) afterBatch(b *backend) {
	if b.changedSchema && b.txStatus == 'I' {
		b.changedSchema = false
		s.noteSchemaChange()
	}
}

// freshStatements closes b's statements if a schema change was counted
// since they were prepared, so that the batch about to run prepares them
// again. It reports false when b failed meanwhile.
func (s *Server) freshStatements(b *backend) bool {
	epoch := s.schemaEpoch.Load()
	if b.statementsEpoch == epoch {
		return true
	}
	b.statementsEpoch = epoch
	if len(b.prepared) == 0 {
		return true
	}
	b.closeAllStatements()
	return !b.broken
}

// closeAllStatements closes every content-named statement on b.
func (b *backend) closeAllStatements() {
	var msgs []byte
	for name := range b.prepared {
		msgs = appendCloseStatement(msgs, name)
	}
	clear(b.prepared)
	msgs = append(msgs, 'S', 0, 0, 0, 4)
	if _, err := b.conn.Write(msgs); err != nil {
		b.close()
		return
	}
	b.drain()
}

// followSchemaChanges counts every schema change announced in the
// topology service after the sidecar started.
func (s *Server) followSchemaChanges(ctx context.Context) {
	for {
		changes, err := s.cfg.Store.WatchSchemaChanges(ctx)
		if err == nil {
			<-changes // as they stand when the sidecar starts
			for range changes {
				s.noteSchemaChange()
			}
			// The watch ended: the sidecar stops, or etcd went away and
			// a change may have been missed meanwhile.
			s.noteSchemaChange()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
