package replicator

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
)

// A stream with StreamTable.Into applies a table's changes to another
// table of the same database whose columns have other types (int to
// bigint, varchar to text), and which lacks one of the table's columns and
// has one of its own: inserts, updates (one leaving a TOASTed value
// unchanged), key changes and deletes all arrive, each value cast.
func TestStreamIntoAnotherTableCastsEachValue(t *testing.T) {
	url := createDatabase(t, "within")
	conn := connect(t, url)
	mustExec(t, conn, `CREATE TABLE a (id int PRIMARY KEY, qty int, name varchar(20), big text, gone int);
		CREATE TABLE b (id bigint PRIMARY KEY, qty bigint, name text, big text, extra text DEFAULT 'x');
		CREATE PUBLICATION within_pub FOR TABLE a`)
	ctx := testCtx(t)
	table, err := DescribeTable(ctx, conn, "public", "a", "")
	if err != nil {
		t.Fatal(err)
	}
	into := &Table{Schema: "public", Name: "b", Columns: []Column{
		{Name: "id", Type: "bigint"}, {Name: "qty", Type: "bigint"}, {Name: "name", Type: "text"},
		{Name: "big", Type: "text"}, {Name: "extra", Type: "text"}}}
	const slot = "within_slot"
	snap, err := OpenSnapshot(ctx, url, slot, false)
	if err != nil {
		t.Fatal(err)
	}
	snap.Close(ctx)
	t.Cleanup(func() { DropSlot(context.Background(), conn, slot) })

	mustExec(t, conn, `INSERT INTO a SELECT g, g * 10, 'n' || g, repeat(md5(g::text), 200), g FROM generate_series(1, 50) g;
		UPDATE a SET qty = 2147483647 WHERE id = 1;
		UPDATE a SET name = 'renamed' WHERE id = 2;
		UPDATE a SET id = 1000 WHERE id = 3;
		DELETE FROM a WHERE id = 4`)
	var end pglogrepl.LSN
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}
	target := connect(t, url)
	s := &Stream{Workflow: "within", Source: "a", SourceConnString: url, Slot: slot, Publication: "within_pub",
		Tables:  []StreamTable{{Table: table, Into: into}},
		Targets: []Target{{Shard: "b", Conn: target}},
		StopAt:  end}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var diff int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (
			(SELECT id::bigint, qty::bigint, name::text, big FROM a EXCEPT SELECT id, qty, name, big FROM b)
			UNION ALL
			(SELECT id, qty, name, big FROM b EXCEPT SELECT id::bigint, qty::bigint, name::text, big FROM a)) d`).Scan(&diff); err != nil {
		t.Fatal(err)
	}
	var rows, extra int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE extra = 'x') FROM b").Scan(&rows, &extra); err != nil {
		t.Fatal(err)
	}
	if diff != 0 || rows != 49 || extra != 49 {
		t.Errorf("b differs from a in %d rows; %d rows, %d with extra's default; want 0, 49, 49", diff, rows, extra)
	}
}
