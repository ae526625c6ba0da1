package replicator

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
)

// CheckReplicaIdentity refuses (SQLSTATE 55000) a table whose replica
// identity does not include its shard key and its order key. The change
// stream routes a DELETE, and an UPDATE that changes the key, by the old
// row's shard key, and finds the target row by its order key; the old row
// carries only the replica identity's columns.
func CheckReplicaIdentity(ctx context.Context, conn *pgx.Conn, t *Table) error {
	var ident string
	var cols []string
	err := conn.QueryRow(ctx, `SELECT c.relreplident::text, coalesce((
			SELECT array_agg(a.attname::text) FROM pg_index i
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])
			WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'd' THEN i.indisprimary ELSE i.indisreplident END
		), '{}')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&ident, &cols)
	if err != nil {
		return err
	}
	refuse := func(why string) error {
		return &pgerr.Error{
			Code:    pgerr.ObjectNotInPrerequisiteState,
			Message: "table " + t.DisplayName() + ": " + why,
			Detail:  "the change stream routes deletes and key changes by the old row's shard key and finds rows by their key; use a replica identity index that covers them, or REPLICA IDENTITY FULL",
		}
	}
	switch ident {
	case "f":
		return nil
	case "n":
		return refuse("replica identity NOTHING: deletes and updates carry no old key")
	}
	in := map[string]bool{}
	for _, c := range cols {
		in[c] = true
	}
	if t.ShardKey >= 0 && !in[t.Columns[t.ShardKey].Name] {
		return refuse("shard key " + t.Columns[t.ShardKey].Name + " is not in the replica identity")
	}
	for _, k := range t.OrderKey {
		if !in[t.Columns[k].Name] {
			return refuse("key column " + t.Columns[k].Name + " is not in the replica identity")
		}
	}
	return nil
}
