package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/workflows"
)

// shadowDDL's test schema: orders (a serial key, a unique index, a check)
// referenced by items, referencing customers; a view, a trigger, a grant
// and a publication on it.
const shadowTestDDL = `CREATE TABLE customers (id int PRIMARY KEY);
	INSERT INTO customers VALUES (1);
	CREATE TABLE orders (id serial PRIMARY KEY, customer_id int NOT NULL REFERENCES customers (id),
		amount int NOT NULL CHECK (amount >= 0), note text UNIQUE);
	INSERT INTO orders (customer_id, amount, note) SELECT 1, g % 100, 'n' || g FROM generate_series(1, 20000) g;
	CREATE TABLE items (id int PRIMARY KEY, order_id int NOT NULL REFERENCES orders (id));
	INSERT INTO items SELECT g, g FROM generate_series(1, 10) g;
	CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 50;
	CREATE TABLE audit (order_id bigint, at timestamptz DEFAULT now());
	CREATE FUNCTION audit_order() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO audit (order_id) VALUES (NEW.id); RETURN NEW; END $$;
	CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION audit_order();
	DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ddl_reader') THEN CREATE ROLE ddl_reader; END IF; END $$;
	GRANT SELECT ON orders TO ddl_reader;
	CREATE PUBLICATION user_pub FOR TABLE orders`

// writers writes to orders on the shard directly (a client of one shard)
// until stopped, keeping what each acknowledged write left: every insert's
// row, every update's amount, every delete's absence.
type writers struct {
	mu     sync.Mutex
	want   map[int64]int32 // id -> amount, as the acknowledged writes left it
	ops    int
	errs   []error
	maxGap time.Duration
	gapEnd time.Time // when the longest pause ended
	stop   chan struct{}
	// pace is a pause after each write: the test of the swap and revert
	// must not depend on a stream outrunning unpaced writers, which a
	// stream built with -race on a loaded machine does not.
	pace    time.Duration
	wg      sync.WaitGroup
	started bool
}

func startWriters(t *testing.T, url string, n int, pace time.Duration) *writers {
	t.Helper()
	w := &writers{want: map[int64]int32{}, stop: make(chan struct{}), pace: pace}
	conn := connect(t, url)
	rows, err := conn.Query(testCtx(t), "SELECT id, amount FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var amount int32
	if _, err := pgx.ForEachRow(rows, []any{&id, &amount}, func() error { w.want[id] = amount; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		// No cached plans: the swap changes the table's row type.
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(testCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go w.run(c, i, n)
	}
	return w
}

func (w *writers) run(c *pgx.Conn, me, n int) {
	defer w.wg.Done()
	defer c.Close(context.Background())
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(me), 7))
	var mine []int64
	w.mu.Lock()
	for id := range w.want {
		if id > 10 && int(id)%n == me {
			mine = append(mine, id)
		}
	}
	w.mu.Unlock()
	last := time.Now()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		var err error
		var id int64
		var amount int32
		switch op := r.IntN(10); {
		case op < 4 || len(mine) == 0:
			amount = int32(r.IntN(100))
			err = c.QueryRow(ctx, "INSERT INTO orders (customer_id, amount) VALUES (1, $1) RETURNING id", amount).Scan(&id)
			if err == nil {
				w.set(id, amount, true)
				mine = append(mine, id)
			}
		case op < 9:
			id = mine[r.IntN(len(mine))]
			err = c.QueryRow(ctx, "UPDATE orders SET amount = amount + 1 WHERE id = $1 RETURNING amount", id).Scan(&amount)
			if err == nil {
				w.set(id, amount, true)
			}
		default:
			i := r.IntN(len(mine))
			id = mine[i]
			_, err = c.Exec(ctx, "DELETE FROM orders WHERE id = $1", id)
			if err == nil {
				w.set(id, 0, false)
				mine = append(mine[:i], mine[i+1:]...)
			}
		}
		now := time.Now()
		w.mu.Lock()
		w.ops++
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: id %d at %s: %w", now.Format("15:04:05.000"), id, now.Format("15:04:05.000"), err))
		}
		if gap := now.Sub(last); gap > w.maxGap {
			w.maxGap, w.gapEnd = gap, now
		}
		w.mu.Unlock()
		if w.pace > 0 {
			time.Sleep(w.pace)
		}
		last = time.Now()
	}
}

func (w *writers) set(id int64, amount int32, present bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if present {
		w.want[id] = amount
	} else {
		delete(w.want, id)
	}
}

// finish stops the writers and checks that the table holds exactly what
// their acknowledged writes left, and that none failed.
func (w *writers) finish(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if len(w.errs) > 0 {
		t.Errorf("%d of %d writes failed: %v", len(w.errs), w.ops, w.errs)
	}
	got := map[int64]int32{}
	rows, err := conn.Query(testCtx(t), "SELECT id, amount FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var amount int32
	if _, err := pgx.ForEachRow(rows, []any{&id, &amount}, func() error { got[id] = amount; return nil }); err != nil {
		t.Fatal(err)
	}
	var missing, wrong, extra int
	for id, a := range w.want {
		if g, ok := got[id]; !ok {
			missing++
		} else if g != a {
			wrong++
		}
	}
	for id := range got {
		if _, ok := w.want[id]; !ok {
			extra++
		}
	}
	if missing+wrong+extra > 0 {
		t.Errorf("%s after %d writes: %d rows missing, %d with a lost update, %d deleted rows back (of %d)", table, w.ops, missing, wrong, extra, len(w.want))
	}
	t.Logf("%d writes, none lost; longest gap between a writer's writes %s", w.ops, w.maxGap)
}

func shadowInput(t *testing.T, a *Activities, sql string) workflows.ShadowInput {
	t.Helper()
	p, err := a.PlanOnlineDDL(testCtx(t), workflows.PlanOnlineDDLInput{WorkflowID: "w",
		Input: workflows.OnlineDDLInput{Database: "sh", SQL: sql, Shards: []string{"s1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != workflows.PathShadow {
		t.Fatalf("%s: path %s (%s), want shadow", sql, p.Path, p.Reason)
	}
	return workflows.ShadowInput{MigrationID: "wf/run1", Database: "sh", Shard: "s1", SQL: sql, Plan: p,
		LockTimeoutMillis: 2000, BatchRows: 3000, BufferMillis: 5000}
}

// retried runs a step again after a failure the workflow would retry (a
// lock not granted, a stream not keeping up on a loaded machine), as the
// workflow does, a few times.
func retried(t *testing.T, step func() (workflows.ShadowResult, error)) (workflows.ShadowResult, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		res, err := step()
		var appErr *temporal.ApplicationError
		if err == nil || attempt == 10 || !errors.As(err, &appErr) || appErr.NonRetryable() {
			return res, err
		}
		t.Logf("attempt %d failed, retrying: %v", attempt, err)
		time.Sleep(time.Second)
	}
}

// scalar reads one value.
func scalar[T any](t *testing.T, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(testCtx(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func TestShadowSwapUnderWritesThenRevertGivesEveryWriteBack(t *testing.T) {
	a := newActivities(t, "sh", shadowTestDDL)
	const sql = "ALTER TABLE orders ALTER COLUMN id TYPE bigint"
	in := shadowInput(t, a, sql)
	ctx := testCtx(t)
	conn := shardConn(t, "sh", "s1")
	url := testPostgres(t).ConnConfig("sh_s1", "")

	res, err := a.PrepareShadow(ctx, in)
	if err != nil || res.State != workflows.ShadowPrepared {
		t.Fatalf("prepare: %+v, %v", res, err)
	}
	if res, err := a.PrepareShadow(ctx, in); err != nil || !res.AlreadyDone {
		t.Fatalf("prepare again: %+v, %v; want already done", res, err)
	}
	if typ := scalar[string](t, conn, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '_tessera_shadow_orders'::regclass AND attname = 'id'"); typ != "bigint" {
		t.Fatalf("the shadow's id is %s", typ)
	}

	w := startWriters(t, url, 2, 2*time.Millisecond)
	// The first copy stops after two batches, as a killed worker's would;
	// the next resumes from a snapshot of its own.
	afterShadowBatch = func(batch int) error {
		if batch == 2 {
			return errors.New("killed")
		}
		return nil
	}
	_, err = a.CopyShadow(ctx, in)
	afterShadowBatch = nil
	if err == nil {
		t.Fatal("the stopped copy succeeded")
	}
	res, err = a.CopyShadow(ctx, in)
	if err != nil || res.State != workflows.ShadowCopied {
		t.Fatalf("resumed copy: %+v, %v", res, err)
	}
	if n := scalar[int64](t, conn, "SELECT count(*) FROM _tessera.copy_progress"); n != 2 {
		t.Errorf("%d copy stretches, want 2 (the stopped copy's and the resumed one's)", n)
	}
	time.Sleep(300 * time.Millisecond) // writes for the stream to carry

	res, err = retried(t, func() (workflows.ShadowResult, error) { return a.SwapShadow(ctx, in) })
	if err != nil {
		t.Fatalf("swap: %v", err)
	}
	t.Logf("swapped at %s", time.Now().Format("15:04:05.000"))
	t.Logf("swap held the lock %.1f ms (%.1f ms of it for the stream to reach the marker); moved %v", res.LockMillis, res.CatchUpMillis, res.Moved)
	if res, err := a.SwapShadow(ctx, in); err != nil || !res.AlreadyDone {
		t.Fatalf("swap again: %+v, %v; want already done", res, err)
	}
	checkSwapped(t, conn, "bigint", "_tessera_old_orders")

	// The reverse stream keeps the old table current while the writers
	// go on against the new one.
	sctx, stopStream := context.WithCancel(ctx)
	streamErr := make(chan error, 1)
	go func() { streamErr <- a.StreamShadow(sctx, in) }()
	time.Sleep(time.Second)
	stopStream()
	if err := <-streamErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("reverse stream: %v", err)
	}

	res, err = retried(t, func() (workflows.ShadowResult, error) { return a.RevertShadow(ctx, in) })
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	t.Logf("reverted at %s: revert held the lock %.1f ms", time.Now().Format("15:04:05.000"), res.LockMillis)
	w.finish(t, conn, "orders")
	checkSwapped(t, conn, "integer", "")
	if n := scalar[int](t, conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'tessera_ddl_%'"); n != 0 {
		t.Errorf("%d slots left after the revert", n)
	}
	if res, err := a.RevertShadow(ctx, in); err != nil || !res.AlreadyDone {
		t.Errorf("revert again: %+v, %v; want already done", res, err)
	}
}

// checkSwapped checks the table in place: its id type, and that the view,
// the foreign keys, the sequence, the trigger, the grant and the
// publication are the table's, not the one set aside (aside, "" if none).
func checkSwapped(t *testing.T, conn *pgx.Conn, idType, aside string) {
	t.Helper()
	if typ := scalar[string](t, conn, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'id'"); typ != idType {
		t.Errorf("orders.id is %s, want %s", typ, idType)
	}
	checks := map[string]string{
		"the view reads orders": `SELECT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
			WHERE r.ev_class = 'big_orders'::regclass AND d.refobjid = 'orders'::regclass)`,
		"items' foreign key references orders, validated": `SELECT EXISTS (SELECT FROM pg_constraint
			WHERE conrelid = 'items'::regclass AND confrelid = 'orders'::regclass AND convalidated)`,
		"orders' foreign key to customers, validated": `SELECT EXISTS (SELECT FROM pg_constraint
			WHERE conrelid = 'orders'::regclass AND confrelid = 'customers'::regclass AND convalidated)`,
		"orders.id owns its sequence":      `SELECT pg_get_serial_sequence('orders', 'id') = 'public.orders_id_seq'`,
		"the trigger is enabled on orders": `SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND tgname = 'orders_audit' AND tgenabled = 'O')`,
		"ddl_reader may read orders":       `SELECT has_table_privilege('ddl_reader', 'orders', 'SELECT')`,
		"user_pub publishes orders":        `SELECT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = 'user_pub' AND tablename = 'orders')`,
		"orders_pkey is orders' index":     `SELECT EXISTS (SELECT FROM pg_index WHERE indexrelid = 'orders_pkey'::regclass AND indrelid = 'orders'::regclass)`,
		"orders_note_key is orders' index": `SELECT EXISTS (SELECT FROM pg_index WHERE indexrelid = 'orders_note_key'::regclass AND indrelid = 'orders'::regclass)`,
	}
	if aside != "" {
		checks["the trigger is disabled on the table set aside"] = fmt.Sprintf(`SELECT tgenabled = 'D' FROM pg_trigger WHERE tgrelid = '%s'::regclass AND tgname = 'orders_audit'`, aside)
	} else {
		checks["no table is set aside"] = `SELECT to_regclass('_tessera_old_orders') IS NULL AND to_regclass('_tessera_shadow_orders') IS NULL`
	}
	for what, q := range checks {
		if !scalar[bool](t, conn, q) {
			t.Errorf("not so: %s", what)
		}
	}
	// They work: the view reads, an insert takes the sequence's next id
	// and fires the trigger once, an item needs its order.
	id := scalar[int64](t, conn, "INSERT INTO orders (customer_id, amount) VALUES (1, 99) RETURNING id", pgx.QueryExecModeSimpleProtocol)
	if n := scalar[int64](t, conn, "SELECT count(*) FROM audit WHERE order_id = $1", id); n != 1 {
		t.Errorf("the insert wrote %d audit rows, want 1", n)
	}
	if n := scalar[int64](t, conn, "SELECT count(*) FROM big_orders WHERE id = $1", id); n != 1 {
		t.Errorf("the view shows %d rows of the new order", n)
	}
	if _, err := conn.Exec(testCtx(t), "INSERT INTO items VALUES (1000, -5)"); err == nil {
		t.Error("an item of no order was accepted")
	}
	mustExec(t, conn, "DELETE FROM orders WHERE id = $1", id)
}
