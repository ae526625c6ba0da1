package planner

import (
	"strings"

	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Statement is the routing plan of one SQL statement. Statements are
// immutable once Plan returns them and may be shared between sessions: a
// cached plan is handed to every session that sends a statement of the same
// shape. Slices in a Statement (Targets, Keys, Tables) must not be modified.
type Statement struct {
	// SQL is this statement's own text, without surrounding whitespace and
	// without the semicolon that ends it. It is what the router sends to
	// the shards.
	SQL string
	// Kind says what the statement does.
	Kind Kind
	// Transaction is the transaction-control command when Kind is
	// Transaction.
	Transaction TransactionKind
	// Setting describes a SET or RESET when Kind is Set.
	Setting *Setting
	// Name is the object the statement names, when it names one the router
	// must track: the parameter of SHOW, the savepoint of SAVEPOINT, RELEASE
	// and ROLLBACK TO, the transaction id of PREPARE TRANSACTION, COMMIT
	// PREPARED and ROLLBACK PREPARED, the cursor of DECLARE, FETCH, MOVE and
	// CLOSE, the prepared statement of PREPARE, EXECUTE and DEALLOCATE.
	Name string
	// Deallocates: DEALLOCATE Name, or DEALLOCATE ALL and DISCARD ALL
	// (Name empty), which forget the session's prepared statements,
	// those of the protocol included.
	Deallocates bool

	// Route says how the target shards are chosen.
	Route RouteKind
	// Targets are the shards of an Authoritative, Scatter or Everywhere
	// route, and, for a Shard route, every shard of the group the keys
	// route over (the candidates Shards picks from), in key order.
	Targets []string
	// Group is the shard group of a Shard or Scatter route.
	Group string
	// Placement is the placement the Keys of a Shard route route with.
	Placement *topo.Placement
	// Keys are the shard-key values of a Shard route, in statement order.
	Keys []Key
	// PerRow is set for an INSERT: Keys hold one value per VALUES row
	// (plus alternate-index checks). Rows that land on several shards make
	// Shards fail with ErrSplitInsert (split them with SplitInsert) or
	// with the reason they cannot be split. For other Shard routes the
	// keys are alternatives (an IN list), and the statement goes to each
	// distinct shard they reach.
	PerRow bool

	// Tables are the tables the statement names, resolved against the
	// search path, without duplicates, in order of appearance.
	Tables []TableName
	// ReadOnly reports that the statement only reads: a SELECT (or SHOW,
	// COPY ... TO, EXPLAIN without ANALYZE of a write) without a locking
	// clause and without a data-modifying WITH. Volatile functions with
	// side effects (nextval, say) are not detected: see SideEffects.
	ReadOnly bool
	// SideEffects (set for SELECTs): the statement calls a function not known to be free
	// of side effects (nextval, a user's function, which may write). Such
	// a statement must not be run twice for one execution.
	SideEffects bool
	// SessionState lists what the statement leaves behind in the backend
	// session, binding the client session to one backend.
	SessionState SessionState
	// NoTransaction reports a statement that cannot run inside a
	// transaction block.
	NoTransaction bool
	// Creates is the relation a CREATE TABLE, VIEW, SEQUENCE or TABLE AS
	// makes, unqualified, temporary or not (a temporary one has the
	// TempTable session state); Drops marks a DROP of relations, which
	// Tables lists. The router follows the session's temporary relations
	// with them.
	Creates string
	Drops   bool
	// Declares marks DECLARE: Name is the cursor, which FETCH, MOVE and
	// CLOSE (Router route, Name) find where it was declared.
	Declares bool
	// Elsewhere is what the shards of an Everywhere route other than the
	// first run instead of SQL: a CREATE TABLE AS without its rows, which
	// only the first shard, where the new table's group is, gets.
	Elsewhere string

	// Merge says how the answers combine when several shards run the
	// statement. One shard's answer always goes through as it is.
	Merge MergeKind
	// Limit is the LIMIT the router applies to a MergeLimit statement;
	// Engine is the operators' plan of a MergeEngine one.
	Limit  Limit
	Engine *engine.Plan
	// CopyInto is the plan of a COPY ... FROM STDIN into a sharded
	// table, whose rows the router splits by shard (copyinto.go).
	CopyInto *CopyInto
	// Gather is how a Gathered statement is answered, or, for a Shard
	// route, how it is when its keys reach several shards (gather.go).
	Gather *GatherPlan
	// KeyMove is how an UPDATE that changes a shard key runs, on the
	// shards Shards (or Targets, for a Scatter route) name
	// (keymove.go).
	KeyMove *KeyMove

	// Err is the error the statement fails with, known at plan time: 0A000
	// for what Tessera cannot route yet, or the Schema's error for an
	// unknown table or column. Plan still returns the statement so that
	// the statements before it in a simple-protocol Query can run.
	Err error
	// Inner is the statement EXPLAIN (TESSERA) explains.
	Inner *Statement
	// Analyze: EXPLAIN (TESSERA, ANALYZE), which runs Inner and reports
	// its rows and time (the router's analyze.go).
	Analyze bool
	// Auto is the prepared form the router may run the statement as when
	// it came alone in a simple-protocol Query (autoprepare.go), or nil.
	Auto *AutoPrepared

	// multiShard is the error of a Shard route whose keys reach more than
	// one shard (a SELECT with ORDER BY and an IN list, say).
	multiShard error
	// semiFrom and semiTo are the indexes, among the input's semicolon
	// tokens, of the semicolons before and after the statement (-1: the
	// start or end of the input); a cache hit with other literal values
	// finds the statement's text by them.
	semiFrom, semiTo int
	// lits are the statement's literal tokens, offsets in SQL, when Auto
	// is set: the values AppendAutoParams sends.
	lits []span
}

// Kind says what a statement does.
type Kind uint8

// Statement kinds.
const (
	Select Kind = iota + 1
	Insert
	Update
	Delete
	Merge
	Copy
	DDL
	Transaction
	Set
	Show
	Explain
	// ExplainTessera is EXPLAIN (TESSERA) stmt: the router answers it with
	// Inner's Describe lines instead of sending anything to a shard.
	ExplainTessera
	Utility
	// Empty is a query string with no statement in it (only whitespace,
	// comments or semicolons): the router answers EmptyQueryResponse.
	Empty
)

var kindNames = [...]string{
	Select: "select", Insert: "insert", Update: "update", Delete: "delete", Merge: "merge",
	Copy: "copy", DDL: "ddl", Transaction: "transaction", Set: "set", Show: "show",
	Explain: "explain", ExplainTessera: "explain tessera", Utility: "utility", Empty: "empty",
}

func (k Kind) String() string { return name(kindNames[:], int(k)) }

// TransactionKind is the transaction-control command of a Transaction
// statement.
type TransactionKind uint8

// Transaction-control commands.
const (
	Begin    TransactionKind = iota + 1 // BEGIN, START TRANSACTION
	Commit                              // COMMIT, END
	Rollback                            // ROLLBACK, ABORT
	Savepoint
	Release    // RELEASE [SAVEPOINT]
	RollbackTo // ROLLBACK TO [SAVEPOINT]
	PrepareTransaction
	CommitPrepared
	RollbackPrepared
	// SetTransaction is SET TRANSACTION ... and SET TRANSACTION SNAPSHOT:
	// they change the current transaction, not the session.
	SetTransaction
)

var transactionNames = [...]string{
	Begin: "begin", Commit: "commit", Rollback: "rollback", Savepoint: "savepoint",
	Release: "release", RollbackTo: "rollback to", PrepareTransaction: "prepare transaction",
	CommitPrepared: "commit prepared", RollbackPrepared: "rollback prepared",
	SetTransaction: "set transaction",
}

func (k TransactionKind) String() string { return name(transactionNames[:], int(k)) }

// Setting is a SET or RESET of a session (or, with LOCAL, transaction)
// parameter.
type Setting struct {
	Op SetOp
	// Name is the parameter as Postgres names it (SET TIME ZONE sets
	// "timezone"); empty for RESET ALL.
	Name string
	// Value is the new value for SetValue: the arguments' values (string
	// literals unquoted) joined by ", ".
	Value string
	// Local is SET LOCAL: the setting ends with the transaction.
	Local bool
}

// SetOp is what a Set statement does to its parameter.
type SetOp uint8

// Set operations.
const (
	SetValue       SetOp = iota + 1 // SET name TO value
	Reset                           // RESET name, SET name TO DEFAULT
	ResetAll                        // RESET ALL
	SetFromCurrent                  // SET name FROM CURRENT
	// SetSessionCharacteristics is SET SESSION CHARACTERISTICS AS
	// TRANSACTION ...: it sets the default_transaction_* parameters, which
	// the statement's SQL spells out.
	SetSessionCharacteristics
)

var setOpNames = [...]string{
	SetValue: "set", Reset: "reset", ResetAll: "reset all", SetFromCurrent: "set from current",
	SetSessionCharacteristics: "set session characteristics",
}

func (o SetOp) String() string { return name(setOpNames[:], int(o)) }

// RouteKind says how a statement's target shards are chosen.
type RouteKind uint8

// Routes.
const (
	// Authoritative runs the statement on the one shard in Targets: the
	// authoritative shard for statements that touch no table (SELECT 1,
	// SHOW, nextval(...), most utility commands) and for tables of the
	// authoritative group, or the shard of the single-shard group that
	// holds all the statement's tables.
	Authoritative RouteKind = iota + 1
	// Shard routes by shard-key values (Keys) to the shards of Group that
	// hold them; Statement.Shards computes them at execution.
	Shard
	// Scatter runs the statement on every shard of Group (Targets) and
	// concatenates the results: it has no usable shard-key predicate.
	Scatter
	// Everywhere runs the statement on every shard in Targets: DDL and
	// roles on every shard of the topology, writes to a reference table
	// on every shard holding a copy.
	Everywhere
	// Router is answered or coordinated by the router itself: transaction
	// control, SET, RESET and SET CONSTRAINTS, EXPLAIN (TESSERA), FETCH,
	// MOVE and CLOSE (which go wherever the cursor was declared), DISCARD,
	// and the empty query.
	Router
	// Gathered pulls the rows of every table the statement reads into
	// a transaction of the authoritative shard's primary, which computes
	// the answer (Statement.Gather, gather.go).
	Gathered
)

var routeNames = [...]string{
	Authoritative: "authoritative", Shard: "shard", Scatter: "scatter",
	Everywhere: "everywhere", Router: "router", Gathered: "gathered",
}

func (r RouteKind) String() string { return name(routeNames[:], int(r)) }

// Pipelinable reports a statement that may share a backend connection
// with other sessions' statements, pipelined behind them (outside a
// transaction; the sidecar's Batch.autocommit): a plain read that leaves
// nothing in the session and calls no function with side effects. A
// write may wait for a row lock held by a transaction whose client
// waits, in turn, for a statement queued behind that write on the same
// connection, a wait no deadlock detector sees; a plain read waits on no
// row lock. And the sidecar may run a pipelined statement twice (its
// shared connection broke under it, or its answer was too large to
// hold), which only a statement without side effects allows.
func (st *Statement) Pipelinable() bool {
	return st.Kind == Select && st.ReadOnly && !st.SideEffects && st.SessionState == 0
}

// SessionState flags what a statement leaves in the backend session beyond
// the transaction, so that the router must keep the client on that backend.
type SessionState uint16

// Session state.
const (
	TempTable     SessionState = 1 << iota // CREATE TEMP TABLE, VIEW or SEQUENCE
	Prepared                               // PREPARE, EXECUTE, DEALLOCATE (SQL level)
	HoldCursor                             // DECLARE ... CURSOR WITH HOLD
	Listen                                 // LISTEN, UNLISTEN
	AdvisoryLock                           // session-level pg_advisory_lock and friends, and their unlock functions
	SessionConfig                          // set_config(name, value, is_local) unless is_local is literally true
	Load                                   // LOAD
	PreparedView                           // reads pg_prepared_statements (with Prepared)
)

var sessionNames = [...]string{"temp table", "prepared statement", "cursor with hold", "listen", "advisory lock", "set_config", "load"}

func (s SessionState) String() string {
	var out []string
	for i, n := range sessionNames {
		if s&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// TableName is a table resolved to its database and schema.
type TableName struct {
	Database, Schema, Table string
}

func (n TableName) String() string { return n.Database + "." + n.Schema + "." + n.Table }

// Key is one shard-key value of a Shard route: where the executor finds it,
// as which type and by which index it routes.
type Key struct {
	// Column is the shard-key column the statement compares or inserts.
	Column string
	// Index routes the value: the placement's index, or, for a WHERE
	// clause, an alternate index of the table (rows' alternate keys land
	// on their placement shard, so a search by one finds them).
	Index *topo.ShardIndex
	// Type is the type the value is routed as: the column's type, the
	// type of a cast on the value (col = '42'::int8), or for a parameter
	// the type given in Parse.
	Type shardfunc.ColumnType
	// Param is the 1-based number of the parameter ($n) holding the value,
	// or 0 for a literal.
	Param int
	// Literal is the literal token as written in SQL ('abc', 42, $$x$$),
	// without the minus sign of a negated number; Offset is its byte
	// offset in the statement's SQL.
	Literal string
	Offset  int
	Class   LiteralClass
	// Negated reports a number preceded by an odd number of unary minus
	// signs, which Postgres folds into the constant.
	Negated bool
	// Row is the 0-based VALUES row of an INSERT key.
	Row int
	// Check marks an INSERT value of an alternate index: it does not
	// route, but must land on the shard the row's placement key chose
	// (SQLSTATE 23514 otherwise).
	Check bool
	// Separate marks a key of another table of the statement, one not
	// joined to the routing table by the shard key: it routes like the
	// others, and all of them must reach one shard (0A000 otherwise).
	Separate bool

	// lit is the index of the literal among the input's literal tokens: a
	// cache hit re-reads the value from the new text by it.
	lit int
	// widens marks an integer literal compared with an integer column
	// without a cast: Postgres types it by its value (int4, int8, else
	// numeric) and compares across types, so a value beyond the column's
	// range (k = 99999999999999999999 for an int8 k) matches no row
	// where routing it as the column's type would fail with 22003.
	widens bool
}

func name(names []string, i int) string {
	if i > 0 && i < len(names) && names[i] != "" {
		return names[i]
	}
	return "invalid"
}
