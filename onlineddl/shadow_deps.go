package onlineddl

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
)

// exchange is the heart of a swap, run in the transaction that holds the
// ACCESS EXCLUSIVE locks of both tables: the table in place (cur, under
// the table's name) is renamed aside, the replacement (repl) takes the
// name, and what hangs off the table by OID rather than by name moves to
// the replacement. Postgres binds views, foreign keys, owned sequences,
// triggers, grants and publication membership to a table's OID, so a
// rename alone would leave them on the table set aside:
//   - views on the table are dropped and created again from their
//     definitions, read before the rename (they then resolve the name to
//     the replacement), with their options, owner and grants;
//   - foreign keys that reference the table are dropped and added again
//     NOT VALID (no scan under the lock); those of the table itself are
//     added NOT VALID to the replacement unless it has them by name; the
//     ones that were valid are returned, to VALIDATE after the lock;
//   - sequences owned by its columns (serial) are owned by the
//     replacement's; an identity column's sequence of the replacement is
//     set to where the table's is;
//   - its user triggers are created on (or enabled again on) the
//     replacement and disabled on the table set aside, which the other
//     direction's stream writes into: they must not fire twice;
//   - its grants are granted on the replacement;
//   - publications that list it list the replacement instead;
//   - each index of the table and its counterpart on the replacement
//     (same kind, same definition but for the names) exchange names, so
//     constraint and index names stay what they were.
//
// The same function swaps back (Revert), with the tables' roles turned.
func exchange(ctx context.Context, tx pgx.Tx, schema, table, repl, aside string) (validate, moved []string, err error) {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	var cur, rep uint32
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1)::oid, to_regclass($2)::oid", q(table), q(repl)).Scan(&cur, &rep); err != nil {
		return nil, nil, err
	}
	var before, after []string
	add := func(list *[]string, format string, args ...any) { *list = append(*list, fmt.Sprintf(format, args...)) }

	// Views.
	rows, err := tx.Query(ctx, `SELECT DISTINCT v.oid, quote_ident(n.nspname) || '.' || quote_ident(v.relname), v.relkind::text,
			pg_get_viewdef(v.oid), coalesce(array_to_string(v.reloptions, ', '), ''), quote_ident(pg_get_userbyid(v.relowner))
		FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
		JOIN pg_namespace n ON n.oid = v.relnamespace
		WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 AND v.oid <> $1
		ORDER BY v.oid DESC`, cur)
	if err != nil {
		return nil, nil, err
	}
	type view struct {
		oid                          uint32
		name, kind, def, opts, owner string
	}
	var views []view
	var v view
	if _, err := pgx.ForEachRow(rows, []any{&v.oid, &v.name, &v.kind, &v.def, &v.opts, &v.owner}, func() error {
		views = append(views, v)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for i := len(views) - 1; i >= 0; i-- { // created in oid order: a view on another after it
		v := views[i]
		if v.kind != "v" {
			return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "materialized view %s depends on %s: the swap does not carry it over", v.name, q(table))
		}
		grants, err := grantsOf(ctx, tx, v.oid, v.name)
		if err != nil {
			return nil, nil, err
		}
		with := ""
		if v.opts != "" {
			with = " WITH (" + v.opts + ")"
		}
		add(&after, "CREATE VIEW %s%s AS %s", v.name, with, strings.TrimSuffix(strings.TrimSpace(v.def), ";"))
		add(&after, "ALTER VIEW %s OWNER TO %s", v.name, v.owner)
		after = append(after, grants...)
		moved = append(moved, "view "+v.name)
	}
	for _, v := range views { // dependents first
		add(&before, "DROP VIEW %s", v.name)
	}

	// Foreign keys referencing the table, and its own.
	rows, err = tx.Query(ctx, `SELECT conrelid::regclass::text, quote_ident(conname), pg_get_constraintdef(oid), convalidated,
			conrelid = $1, EXISTS (SELECT FROM pg_constraint o WHERE o.conrelid = $2 AND o.conname = k.conname)
		FROM pg_constraint k WHERE contype = 'f' AND (confrelid = $1 OR conrelid = $1) ORDER BY oid`, cur, rep)
	if err != nil {
		return nil, nil, err
	}
	var rel, name, def string
	var valid, own, replHas bool
	if _, err := pgx.ForEachRow(rows, []any{&rel, &name, &def, &valid, &own, &replHas}, func() error {
		target := rel
		if own {
			if replHas {
				return nil
			}
			target = q(table) // the replacement, once renamed
		} else {
			add(&before, "ALTER TABLE %s DROP CONSTRAINT %s", rel, name)
		}
		add(&after, "ALTER TABLE %s ADD CONSTRAINT %s %s NOT VALID", target, name, def)
		if valid {
			validate = append(validate, fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", target, name))
		}
		moved = append(moved, "foreign key "+name+" of "+target)
		return nil
	}); err != nil {
		return nil, nil, err
	}

	// Sequences owned by its columns.
	rows, err = tx.Query(ctx, `SELECT s.oid::regclass::text, quote_ident(a.attname), d.deptype::text,
			coalesce(pg_get_serial_sequence($3, a.attname), ''),
			EXISTS (SELECT FROM pg_attribute r WHERE r.attrelid = $2 AND r.attname = a.attname AND NOT r.attisdropped)
		FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
		JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 AND d.deptype IN ('a', 'i')`,
		cur, rep, q(repl))
	if err != nil {
		return nil, nil, err
	}
	var seq, col, dep, replSeq string
	var hasCol bool
	if _, err := pgx.ForEachRow(rows, []any{&seq, &col, &dep, &replSeq, &hasCol}, func() error {
		switch {
		case !hasCol:
		case dep == "a":
			add(&after, "ALTER SEQUENCE %s OWNED BY %s.%s", seq, q(table), col)
			moved = append(moved, "sequence "+seq)
		case replSeq != "":
			// Identity: the replacement has a sequence of its own.
			add(&after, "SELECT setval(%s::regclass, last_value, is_called) FROM %s", quoteLit(replSeq), seq)
			moved = append(moved, "identity "+col+" from "+seq)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}

	// Triggers.
	rows, err = tx.Query(ctx, `SELECT quote_ident(tgname), pg_get_triggerdef(oid),
			EXISTS (SELECT FROM pg_trigger o WHERE o.tgrelid = $2 AND o.tgname = t.tgname)
		FROM pg_trigger t WHERE tgrelid = $1 AND NOT tgisinternal ORDER BY tgname`, cur, rep)
	if err != nil {
		return nil, nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&name, &def, &replHas}, func() error {
		if replHas {
			add(&after, "ALTER TABLE %s ENABLE TRIGGER %s", q(table), name)
		} else {
			after = append(after, def)
		}
		add(&after, "ALTER TABLE %s DISABLE TRIGGER %s", q(aside), name)
		moved = append(moved, "trigger "+name)
		return nil
	}); err != nil {
		return nil, nil, err
	}

	// Grants and publications.
	grants, err := grantsOf(ctx, tx, cur, q(table))
	if err != nil {
		return nil, nil, err
	}
	after = append(after, grants...)
	if len(grants) > 0 {
		moved = append(moved, fmt.Sprintf("%d grants", len(grants)))
	}
	rows, err = tx.Query(ctx, `SELECT quote_ident(p.pubname) FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
		WHERE r.prrelid = $1 AND p.pubname NOT LIKE 'tessera\_ddl\_%'`, cur)
	if err != nil {
		return nil, nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error {
		add(&after, "ALTER PUBLICATION %s DROP TABLE %s", name, q(aside))
		add(&after, "ALTER PUBLICATION %s ADD TABLE %s", name, q(table))
		moved = append(moved, "publication "+name)
		return nil
	}); err != nil {
		return nil, nil, err
	}

	// Index names.
	pairs, err := indexPairs(ctx, tx, cur, rep)
	if err != nil {
		return nil, nil, err
	}
	var renames []string
	for i, p := range pairs {
		tmp := fmt.Sprintf("_tessera_swap_%d", i)
		add(&renames, "ALTER INDEX %s RENAME TO %s", q(p[0]), pgx.Identifier{tmp}.Sanitize())
		add(&renames, "ALTER INDEX %s RENAME TO %s", q(p[1]), pgx.Identifier{p[0]}.Sanitize())
		add(&renames, "ALTER INDEX %s RENAME TO %s", q(tmp), pgx.Identifier{p[1]}.Sanitize())
	}

	stmts := append(before,
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", q(table), pgx.Identifier{aside}.Sanitize()),
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", q(repl), pgx.Identifier{table}.Sanitize()))
	stmts = append(stmts, renames...)
	stmts = append(stmts, after...)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", firstWords(s), err)
		}
	}
	return validate, moved, nil
}

// grantsOf turns a relation's ACL into GRANT statements on name.
func grantsOf(ctx context.Context, tx pgx.Tx, oid uint32, name string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT a.privilege_type,
			CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.is_grantable
		FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = $1 AND a.grantee <> c.relowner`, oid)
	if err != nil {
		return nil, err
	}
	var out []string
	var priv, grantee string
	var grantable bool
	_, err = pgx.ForEachRow(rows, []any{&priv, &grantee, &grantable}, func() error {
		s := fmt.Sprintf("GRANT %s ON %s TO %s", priv, name, grantee)
		if grantable {
			s += " WITH GRANT OPTION"
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// indexPairs pairs each index of cur with one of rep of the same kind and
// definition (the part from USING on, which names neither), by name order.
func indexPairs(ctx context.Context, tx pgx.Tx, cur, rep uint32) ([][2]string, error) {
	rows, err := tx.Query(ctx, `SELECT i.indrelid = $1, c.relname,
			i.indisprimary::text || i.indisunique::text || substring(pg_get_indexdef(i.indexrelid) from ' USING .*$')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid IN ($1, $2) ORDER BY c.relname`, cur, rep)
	if err != nil {
		return nil, err
	}
	var isCur bool
	var name, sig string
	curBySig := map[string][]string{}
	var repl [][2]string
	if _, err := pgx.ForEachRow(rows, []any{&isCur, &name, &sig}, func() error {
		if isCur {
			curBySig[sig] = append(curBySig[sig], name)
		} else {
			repl = append(repl, [2]string{sig, name})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out [][2]string
	for _, r := range repl {
		if c := curBySig[r[0]]; len(c) > 0 && c[0] != r[1] {
			out = append(out, [2]string{c[0], r[1]})
			curBySig[r[0]] = c[1:]
		}
	}
	return out, nil
}

func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func firstWords(sql string) string {
	if len(sql) > 80 {
		return sql[:80] + "..."
	}
	return sql
}
