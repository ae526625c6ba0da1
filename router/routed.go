package router

import (
	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// stmtKind is what the router itself must do about a statement.
type stmtKind int

const (
	kindRegular     stmtKind = iota // run where the plan says
	kindBegin                       // BEGIN / START TRANSACTION
	kindCommit                      // COMMIT / END (and PREPARE TRANSACTION on one shard)
	kindRollback                    // ROLLBACK / ABORT
	kindTxOther                     // SAVEPOINT, RELEASE, ROLLBACK TO, SET TRANSACTION: every shard of the transaction
	kindSet                         // SET / RESET of a session setting
	kindTesseraSet                  // SET tessera.*
	kindTesseraShow                 // SHOW tessera.*
	kindExplain                     // EXPLAIN (TESSERA)
	kindDeallocate                  // DEALLOCATE of a statement of the protocol, answered by the router
	kindOnlineDDL                   // a schema change under tessera.ddl_strategy online: an OnlineDDL migration
	kindEmpty
)

// routeMode says how many shards run a statement and how answers combine.
type routeMode int

const (
	routeOne          routeMode = iota // one shard; its answer goes through untouched
	routeScatter                       // several shards; rows merged as they arrive
	routeEverywhere                    // DDL: every shard; one answer
	routeSplit                         // a multi-row INSERT split by shard (insertsplit.go)
	routeCopyInto                      // COPY FROM STDIN split by shard (copyinto.go)
	routeGather                        // rows gathered into the authoritative shard, which computes the answer (gather.go)
	routeKeyMove                       // an UPDATE that changes shard keys: rows move between shards (keymove.go)
	routeInsertSelect                  // an extended-protocol INSERT ... SELECT the router runs (insertselect_ext.go)
)

// routed is one statement with its targets resolved.
type routed struct {
	sql       string
	kind      stmtKind
	mode      routeMode
	shards    []string
	allShards bool // no shard-key value: every shard of the group
	readOnly  bool
	// limited: on several shards, pass on at most limit rows (LIMIT
	// without ORDER BY).
	limited bool
	limit   int64
	// engine: on several shards, the plan the router runs over their
	// rows (merge.go).
	engine *engine.Plan
	// copyInto: the plan of a COPY split by shard.
	copyInto *planner.CopyInto
	// shardStmt: in the extended protocol, the statement the shards run
	// for an engine plan with other SQL (engine.Plan.ShardSQL), bound
	// with the client's parameters.
	shardStmt *pb.PreparedStatement
	// gather: the statement is computed by Postgres over the rows
	// gathered from the shards (gather.go); in the extended protocol
	// shardStmt is then the computing statement.
	gather       *planner.GatherPlan
	sessionState bool // binds the client session to one backend from now on
	rollbackTo   bool // ROLLBACK TO, which a failed transaction may run
	scan         bool // the caller must know whether the statement failed
	// txControl: in an extended-protocol batch, a statement placed when
	// it runs (COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO, SET
	// LOCAL; extended.go's runSegment).
	txControl bool
	// autocommit: a plain read (SELECT without locking clauses or
	// data-modifying WITH) that keeps no session state; outside a
	// transaction the sidecar may pipeline it on a connection other
	// sessions share (Batch.autocommit).
	autocommit bool
	// callsSequences: it may call a sequence function where it runs
	// (it writes, or calls a function that may); setsSequence: it calls
	// setval (sequence.go).
	callsSequences, setsSequence bool
	// autoPrepared: the statement runs as its prepared form
	// (autoprepare.go); a failure before any answer runs it as written.
	autoPrepared bool
	// replannable: the statement came alone, outside a transaction, and
	// the caller plans it again when a cutover's fence refuses it
	// (errCutoverFenced).
	replannable bool
	ddl         bool // changes the schema: invalidate caches
	// relations: DDL that may create or drop a relation the session
	// follows (follow.go); onAuthOnly: it names one that exists on the
	// authoritative shard only, and runs there alone.
	relations  *planner.Statement
	onAuthOnly bool
	declares   string // DECLARE of this cursor: remember its shard
	// deallocates: DEALLOCATE of statement deallocName, or of all of
	// them (DEALLOCATE ALL, DISCARD ALL) when it is empty.
	deallocates bool
	deallocName string
	// preparedView: reads pg_prepared_statements (ownnames.go).
	preparedView bool
	// elsewhere: what the shards after the first run instead
	// (planner.Statement.Elsewhere).
	elsewhere string
	roles     bool // changes roles or databases: refresh the role cache
	setName   string
	setValue  string
	setLocal  bool
	reset     bool
	explain   []string // EXPLAIN (TESSERA) lines
	// analyze: EXPLAIN (TESSERA, ANALYZE)'s statement, run for its
	// figures (analyze.go).
	analyze *plannedStmt
	sets    []*routed // SETs inside a multi-statement string sent whole
	err     error     // the statement cannot run (0A000, 42601, ...)
	split   *splitInsert
	keyMove *planner.KeyMove
	// keyMoveBind: an extended-protocol key move's Bind (keymove.go).
	keyMoveBind *keyMoveBind
	// insertSelectBind: an extended-protocol INSERT ... SELECT's Bind
	// (insertselect_ext.go).
	insertSelectBind *insertSelectBind
}
