package ddl

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Retarget rewrites a one-statement ALTER TABLE to change another table,
// schema.name, instead: OnlineDDL's shadow path runs the statement on the
// shadow table. It refuses what the shadow path cannot copy into: an
// ALTER COLUMN TYPE with USING (the copy and the change stream cast each
// old value to the new type; an expression of other columns they would
// not apply) and anything but ALTER TABLE.
func Retarget(sql, schema, name string) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return "", err
	}
	if len(tree.Stmts) != 1 {
		return "", fmt.Errorf("want one statement, got %d", len(tree.Stmts))
	}
	alter := tree.Stmts[0].GetStmt().GetAlterTableStmt()
	if alter == nil || alter.GetObjtype() != pg_query.ObjectType_OBJECT_TABLE {
		return "", fmt.Errorf("the shadow path runs ALTER TABLE only")
	}
	for _, n := range alter.GetCmds() {
		cmd := n.GetAlterTableCmd()
		if cmd == nil {
			continue
		}
		if cmd.GetSubtype() == pg_query.AlterTableType_AT_AlterColumnType {
			if def := cmd.GetDef().GetColumnDef(); def != nil && def.GetRawDefault() != nil {
				return "", fmt.Errorf("ALTER COLUMN %s TYPE ... USING: the shadow path casts each value to the new type and cannot apply an expression", cmd.GetName())
			}
		}
	}
	alter.Relation.Schemaname, alter.Relation.Relname = schema, name
	return pg_query.Deparse(tree)
}
