package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// shadowDDL creates the record of each shard's shadow-path migrations:
// the names it uses and how far it has come. The state changes in the same
// transaction as the step it records (the swap's renames, the cleanup's
// drops), so a retried step finds whether it happened.
const shadowDDL = `CREATE SCHEMA IF NOT EXISTS _tessera;
CREATE TABLE IF NOT EXISTS _tessera.shadow_migrations (
	id text PRIMARY KEY,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	shadow_name text NOT NULL,
	old_name text NOT NULL,
	statement text NOT NULL,
	state text NOT NULL,
	swap_lsn pg_lsn,
	validate text[] NOT NULL DEFAULT '{}',
	updated_at timestamptz NOT NULL DEFAULT now())`

// swapMarkerPrefix prefixes the logical decoding message a swap writes
// once it holds the table's lock.
const swapMarkerPrefix = "tessera_ddl_swap"

// shadowNames are the names one shard's migration uses. Slots and
// replication origins are the instance's, not the database's: the tag
// hashes the migration, database and shard, so that shards sharing an
// instance (as in tests) do not collide.
type shadowNames struct {
	schema, table, shadow, old string
	// tag names the streams: "ddl_<hash>".
	tag string
}

func namesOf(in workflows.ShadowInput) shadowNames {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", in.MigrationID, in.Database, in.Shard)
	return shadowNames{
		schema: in.Plan.Schema, table: in.Plan.Table,
		shadow: truncName("_tessera_shadow_" + in.Plan.Table),
		old:    truncName("_tessera_old_" + in.Plan.Table),
		tag:    fmt.Sprintf("ddl_%016x", h.Sum64()),
	}
}

// truncName keeps a name within Postgres's 63 bytes.
func truncName(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

func (n shadowNames) qual(name string) string { return pgx.Identifier{n.schema, name}.Sanitize() }

// The forward stream carries the old table's writes to the shadow; after
// the swap the reverse one carries the new table's to the old.
func (n shadowNames) slot(forward bool) string {
	if forward {
		return "tessera_" + n.tag + "_f"
	}
	return "tessera_" + n.tag + "_r"
}

func (n shadowNames) publication(forward bool) string { return n.slot(forward) }

func direction(forward bool) string {
	if forward {
		return "fwd"
	}
	return "rev"
}

// origin is the replication origin of a direction's stream
// (replicator.OriginName of its workflow, source and target).
func (n shadowNames) origin(forward bool) string {
	return replicator.OriginName(n.tag, direction(forward), "t")
}

// shadowRecord is a shard's row of _tessera.shadow_migrations.
type shadowRecord struct {
	state    string
	swapLSN  *string
	validate []string
}

func readRecord(ctx context.Context, conn *pgx.Conn, id string) (*shadowRecord, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('_tessera.shadow_migrations') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return nil, err
	}
	r := &shadowRecord{}
	err := conn.QueryRow(ctx, `SELECT state, swap_lsn::text, validate FROM _tessera.shadow_migrations WHERE id = $1`, id).
		Scan(&r.state, &r.swapLSN, &r.validate)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// shadowStep connects to the shard and reads its record of the migration.
func (a *Activities) shadowStep(ctx context.Context, in workflows.ShadowInput) (*pgx.Conn, shadowNames, *shadowRecord, error) {
	if in.MigrationID == "" || in.Shard == "" || in.Plan.Table == "" || in.Plan.Schema == "" {
		return nil, shadowNames{}, nil, refuse(pgerr.InvalidParameterValue, "migration_id, shard and the plan's table are required")
	}
	conn, err := a.connect(ctx, in.Shard, in.Database)
	if err != nil {
		return nil, shadowNames{}, nil, err
	}
	rec, err := readRecord(ctx, conn, in.MigrationID)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, shadowNames{}, nil, err
	}
	return conn, namesOf(in), rec, nil
}

// PrepareShadow creates the shard's shadow table: a copy of the table's
// definition (LIKE ... INCLUDING ALL: columns, defaults, constraints other
// than foreign keys, indexes, identity, storage, comments) with the
// statement run on it, and records the migration. A table the swap could
// not carry over is refused first: a partitioned or inherited table, one
// with row security, rules, or publications with row filters or column
// lists. The shadow takes the table's owner.
func (a *Activities) PrepareShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stop := beatEvery(ctx, 5*time.Second, func() any { return nil })
	defer stop()
	if rec != nil {
		return workflows.ShadowResult{State: rec.state, AlreadyDone: true}, nil
	}
	alter, err := ddl.Retarget(in.SQL, n.schema, n.shadow)
	if err != nil {
		return workflows.ShadowResult{}, refuse(pgerr.FeatureNotSupported, "%v", err)
	}
	if err := checkShadowable(ctx, conn, n); err != nil {
		return workflows.ShadowResult{}, activityError(fmt.Errorf("shard %s: %w", in.Shard, err))
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Shards of one instance share nothing here, but two attempts of
		// one shard must not both create the record's table.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('_tessera.shadow_migrations'))"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, shadowDDL); err != nil {
			return err
		}
		var owner string
		if err := tx.QueryRow(ctx, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass($1)", n.qual(n.table)).Scan(&owner); err != nil {
			return err
		}
		for _, s := range []string{
			fmt.Sprintf("SET LOCAL lock_timeout = %d", in.LockTimeoutMillis),
			fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", n.qual(n.shadow), n.qual(n.table)),
			fmt.Sprintf("ALTER TABLE %s OWNER TO %s", n.qual(n.shadow), pgx.Identifier{owner}.Sanitize()),
			alter,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO _tessera.shadow_migrations (id, schema_name, table_name, shadow_name, old_name, statement, state)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, in.MigrationID, n.schema, n.table, n.shadow, n.old, in.SQL, workflows.ShadowPrepared)
		return err
	})
	if err != nil {
		return workflows.ShadowResult{}, activityError(fmt.Errorf("shard %s: creating the shadow table %s: %w", in.Shard, n.shadow, err))
	}
	return workflows.ShadowResult{State: workflows.ShadowPrepared}, nil
}

// checkShadowable refuses (0A000) a table whose swap would lose something,
// and a shadow name some other table holds (42P07).
func checkShadowable(ctx context.Context, conn *pgx.Conn, n shadowNames) error {
	var kind string
	var inherits, rls, rules, filtered, taken bool
	err := conn.QueryRow(ctx, `SELECT c.relkind::text,
			EXISTS (SELECT FROM pg_inherits WHERE inhrelid = c.oid OR inhparent = c.oid),
			c.relrowsecurity OR EXISTS (SELECT FROM pg_policy WHERE polrelid = c.oid),
			EXISTS (SELECT FROM pg_rewrite WHERE ev_class = c.oid),
			EXISTS (SELECT FROM pg_publication_rel WHERE prrelid = c.oid AND (prqual IS NOT NULL OR prattrs IS NOT NULL)),
			to_regclass($2) IS NOT NULL OR to_regclass($3) IS NOT NULL
		FROM pg_class c WHERE c.oid = to_regclass($1)`, n.qual(n.table), n.qual(n.shadow), n.qual(n.old)).
		Scan(&kind, &inherits, &rls, &rules, &filtered, &taken)
	if errors.Is(err, pgx.ErrNoRows) {
		return pgerr.New("42P01", "relation %s does not exist", n.qual(n.table))
	}
	if err != nil {
		return err
	}
	switch {
	case kind != "r":
		return pgerr.New(pgerr.FeatureNotSupported, "%s is not a plain table (relkind %s): the shadow path does not swap partitioned tables", n.qual(n.table), kind)
	case inherits:
		return pgerr.New(pgerr.FeatureNotSupported, "%s has inheritance parents or children, which a swap would not carry over", n.qual(n.table))
	case rls:
		return pgerr.New(pgerr.FeatureNotSupported, "%s has row-level security, whose policies a swap does not carry over yet", n.qual(n.table))
	case rules:
		return pgerr.New(pgerr.FeatureNotSupported, "%s has rules, which a swap does not carry over", n.qual(n.table))
	case filtered:
		return pgerr.New(pgerr.FeatureNotSupported, "%s is in a publication with a row filter or column list, which a swap does not carry over yet", n.qual(n.table))
	case taken:
		return pgerr.New("42P07", "%s or %s exists already: another migration of %s has not ended", n.shadow, n.old, n.table)
	}
	_, err = replicator.DescribeTable(ctx, conn, n.schema, n.table, "")
	return err
}

// beatEvery heartbeats the activity until stopped, with details.
func beatEvery(ctx context.Context, every time.Duration, details func() any) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, details())
			}
		}
	}()
	return func() { close(done) }
}
