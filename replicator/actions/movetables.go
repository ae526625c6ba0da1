package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// PlanMoveTables checks a MoveTables and returns its plan, changing
// nothing: every table is placed by key in one shard group other than
// the target, which exists and shares no shard with it; each table has
// a primary key (or a unique key of non-null columns), a replica
// identity the stream can use and, on a sharded target, the target
// index's column, on every source; and every target shard has a primary
// and already holds each table, with the same columns, empty. Tessera
// does not create the tables on the targets: the operator does, as for
// any schema (docs/operations.md). For an import (in.Input.Source) the
// source is the external Postgres, whose wal_level must be logical
// (planImport). Each problem is a non-retryable error with its SQLSTATE.
func (a *Actions) PlanMoveTables(ctx context.Context, in workflows.PlanMoveTablesInput) (workflows.ReshardPlan, error) {
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.ReshardPlan{}, activityError(err)
	}
	if snap == nil || snap.Topology == nil {
		return workflows.ReshardPlan{}, refuse(pgerr.ObjectNotInPrerequisiteState, "no topology is stored")
	}
	plan, err := planMove(snap.Topology, in)
	if err != nil {
		return plan, err
	}
	plan.TopologyRevision = snap.Revision
	plan.CopyBatchRows = in.Input.CopyBatchRows
	for _, shard := range plan.Targets {
		st, err := a.Store.GetShardState(ctx, shard)
		if err != nil {
			return plan, activityError(err)
		}
		if st.Primary == "" {
			return plan, refuse(pgerr.UndefinedObject, "target shard %s has no primary", shard)
		}
	}
	a = a.forPlan(plan)
	if plan.Imports() {
		if err := a.checkImportSource(ctx, plan); err != nil {
			return plan, err
		}
	}
	if err := a.checkMoveSources(ctx, &plan); err != nil {
		return plan, err
	}
	if err := a.checkMoveTargets(ctx, plan); err != nil {
		return plan, err
	}
	// Before any slot: a promotion from now on is seen as a failover.
	if plan.Terms, err = a.shardTerms(ctx, plan.Sources); err != nil {
		return plan, err
	}
	return plan, a.estimateRows(ctx, &plan)
}

// planMove checks the input against the stored topology and computes the
// plan's groups, shards, tables and target topology.
func planMove(top *topo.Topology, in workflows.PlanMoveTablesInput) (workflows.ReshardPlan, error) {
	m := in.Input
	plan := workflows.ReshardPlan{Key: workflows.MoveTablesKey(in.WorkflowID), Database: m.Database, TargetShardGroup: m.TargetShardGroup}
	if in.WorkflowID == "" || m.Database == "" || m.TargetShardGroup == "" || len(m.Tables) == 0 {
		return plan, refuse(pgerr.InvalidParameterValue, "database, tables and target_shard_group are required")
	}
	if err := checkCopyBatchRows(m.CopyBatchRows); err != nil {
		return plan, err
	}
	if m.Source != nil {
		return planImport(top, in)
	}
	target, ok := top.Group(m.TargetShardGroup)
	if !ok {
		return plan, refuse(pgerr.UndefinedObject, "shard group %q does not exist", m.TargetShardGroup)
	}
	tables, err := tableNames(m.Tables)
	if err != nil {
		return plan, err
	}
	for _, t := range tables {
		p := top.Resolve(m.Database, t.Schema, t.Name)
		if p.IsReference() {
			return plan, refuse(pgerr.FeatureNotSupported, "%s is a reference table: MoveTables moves tables placed by key", t.DisplayName())
		}
		switch {
		case p.Group.UID == m.TargetShardGroup:
			return plan, refuse(pgerr.ObjectNotInPrerequisiteState, "%s is already in shard group %s", t.DisplayName(), m.TargetShardGroup)
		case plan.ShardGroup == "":
			plan.ShardGroup = p.Group.UID
		case plan.ShardGroup != p.Group.UID:
			return plan, refuse(pgerr.FeatureNotSupported, "the tables are in shard groups %s and %s: one MoveTables moves tables of one group", plan.ShardGroup, p.Group.UID)
		}
		t.ReverseShardColumn = p.ShardColumn()
		plan.Tables = append(plan.Tables, t)
	}
	source, _ := top.Group(plan.ShardGroup)
	plan.Sources, plan.Targets = source.Shards(), target.Shards()
	for _, s := range plan.Targets {
		if slices.Contains(plan.Sources, s) {
			return plan, refuse(pgerr.FeatureNotSupported, "shard %s is in both %s and %s: the tables cannot move within one database", s, plan.ShardGroup, m.TargetShardGroup)
		}
	}
	if plan.TargetTopology, err = targetPlacement(top, m, plan.Tables); err != nil {
		return plan, err
	}
	if plan.SourceTopology, err = json.Marshal(top); err != nil {
		return plan, activityError(err)
	}
	return plan, fillShardColumns(&plan)
}

// tableNames reads schema.name (a bare name is in public), each once.
func tableNames(names []string) ([]workflows.ReshardTable, error) {
	var out []workflows.ReshardTable
	for _, name := range names {
		schema, table, ok := strings.Cut(name, ".")
		if !ok {
			schema, table = "public", name
		}
		if schema == "" || table == "" || strings.Contains(table, ".") {
			return nil, refuse(pgerr.InvalidParameterValue, "table %q: want schema.name", name)
		}
		if slices.ContainsFunc(out, func(t workflows.ReshardTable) bool { return t.Schema == schema && t.Name == table }) {
			return nil, refuse(pgerr.InvalidParameterValue, "table %s.%s is named twice", schema, table)
		}
		out = append(out, workflows.ReshardTable{Schema: schema, Name: table})
	}
	return out, nil
}

// targetPlacement is the stored topology with each table given its own
// entry in the target group, checked by the topology's validation.
func targetPlacement(top *topo.Topology, m workflows.MoveTablesInput, tables []workflows.ReshardTable) (json.RawMessage, error) {
	entry := map[string]any{"shard_group": m.TargetShardGroup}
	if m.ShardIndex != "" {
		entry["shard_index"] = m.ShardIndex
	}
	doc, err := placeTablesWith(top, m.Database, tables, entry, nil)
	if err != nil {
		return nil, err
	}
	if _, err := topo.Parse(doc); err != nil {
		return nil, refuse(pgerr.InvalidParameterValue, "the tables in shard group %s: %v", m.TargetShardGroup, err)
	}
	return doc, nil
}

// fillShardColumns sets each table's routing column in either direction:
// its placement's in the target and in the source topology. A
// single-shard group routes every row to its shard whatever the key, so
// the other side's column serves (both empty: checkMoveSources picks the
// first primary key column).
func fillShardColumns(plan *workflows.ReshardPlan) error {
	target, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return activityError(err)
	}
	source, err := topo.Parse(plan.SourceTopology)
	if err != nil {
		return activityError(err)
	}
	for i := range plan.Tables {
		t := &plan.Tables[i]
		t.ShardColumn = target.Resolve(plan.Database, t.Schema, t.Name).ShardColumn()
		t.ReverseShardColumn = source.Resolve(plan.Database, t.Schema, t.Name).ShardColumn()
		if t.ShardColumn == "" {
			t.ShardColumn = t.ReverseShardColumn
		}
		if t.ReverseShardColumn == "" {
			t.ReverseShardColumn = t.ShardColumn
		}
	}
	return nil
}

// placeTablesWith is top's document with each table of database given
// entry, and group (if not nil) added to the shard groups.
func placeTablesWith(top *topo.Topology, database string, tables []workflows.ReshardTable, entry any, group map[string]any) (json.RawMessage, error) {
	entries := map[[2]string]any{}
	for _, t := range tables {
		entries[[2]string{t.Schema, t.Name}] = entry
	}
	return placeTables(top, database, entries, group)
}

// placeTables is top's document with the named tables' entries of
// database replaced: an entry of nil removes the table's own entry (it
// then inherits its schema's placement); group, if not nil, is added to
// the shard groups.
func placeTables(top *topo.Topology, database string, entries map[[2]string]any, group map[string]any) (json.RawMessage, error) {
	raw, err := json.Marshal(top)
	if err != nil {
		return nil, activityError(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, activityError(err)
	}
	if group != nil {
		groups, _ := doc["shard_groups"].([]any)
		doc["shard_groups"] = append(groups, group)
	}
	for name, entry := range entries {
		tables := child(child(child(child(doc, "databases"), database), "schemas"), name[0])
		tables = child(tables, "tables")
		if entry == nil {
			delete(tables, name[1])
		} else {
			tables[name[1]] = entry
		}
	}
	out, err := json.Marshal(doc)
	return out, activityError(err)
}

// child is m[key] as an object, made if missing.
func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}

// tableEntry is a table's own entry in a topology document, or nil.
func tableEntry(doc json.RawMessage, database, schema, table string) (any, error) {
	var d struct {
		Databases map[string]struct {
			Schemas map[string]struct {
				Tables map[string]any `json:"tables"`
			} `json:"schemas"`
		} `json:"databases"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, activityError(err)
	}
	return d.Databases[database].Schemas[schema].Tables[table], nil
}

// checkMoveSources describes each table on every source by both its
// columns (the forward streams' and the reverse ones'), choosing the
// first primary key column where no group routes the table by value.
func (a *Actions) checkMoveSources(ctx context.Context, plan *workflows.ReshardPlan) error {
	for i, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return err
		}
		err = func() error {
			defer closeAll(conn)
			for j := range plan.Tables {
				t := &plan.Tables[j]
				if i == 0 && t.ShardColumn == "" {
					col, err := firstKeyColumn(ctx, conn, *t)
					if err != nil {
						return err
					}
					t.ShardColumn, t.ReverseShardColumn = col, col
				}
				for _, col := range []string{t.ShardColumn, t.ReverseShardColumn} {
					d, err := replicator.DescribeTable(ctx, conn, t.Schema, t.Name, col)
					if err != nil {
						return err
					}
					if err := replicator.CheckReplicaIdentity(ctx, conn, d); err != nil {
						return err
					}
				}
			}
			return nil
		}()
		if err != nil {
			return activityError(fmt.Errorf("source %s: %w", src, err))
		}
	}
	return nil
}

// firstKeyColumn is the first column of a table's primary key.
func firstKeyColumn(ctx context.Context, conn *pgx.Conn, t workflows.ReshardTable) (string, error) {
	var col string
	err := conn.QueryRow(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = to_regclass($1) AND i.indisprimary`, pgx.Identifier{t.Schema, t.Name}.Sanitize()).Scan(&col)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", pgerr.New(pgerr.ObjectNotInPrerequisiteState, "table %s has no primary key", t.DisplayName())
	}
	return col, err
}

// checkMoveTargets checks that every target holds each table, with the
// source's columns, and no rows: the copy fills it, the VDiff would count
// any row already there as a difference.
func (a *Actions) checkMoveTargets(ctx context.Context, plan workflows.ReshardPlan) error {
	want := map[string][]replicator.Column{}
	conn, _, err := a.connect(ctx, plan.Sources[0], plan.Database)
	if err != nil {
		return err
	}
	for _, t := range plan.Tables {
		d, err := replicator.DescribeTable(ctx, conn, t.Schema, t.Name, t.ShardColumn)
		if err != nil {
			closeAll(conn)
			return activityError(err)
		}
		want[t.DisplayName()] = d.Columns
	}
	closeAll(conn)
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return err
		}
		err = func() error {
			defer closeAll(conn)
			for _, t := range plan.Tables {
				d, err := replicator.DescribeTable(ctx, conn, t.Schema, t.Name, t.ShardColumn)
				if pgerr.Code(err) == "42P01" {
					return pgerr.New(pgerr.UndefinedObject, "table %s does not exist: create it on every shard of %s first", t.DisplayName(), plan.TargetShardGroup)
				}
				if err != nil {
					return err
				}
				if !slices.Equal(d.Columns, want[t.DisplayName()]) {
					return pgerr.New(pgerr.ObjectNotInPrerequisiteState, "table %s has other columns than on the sources: %v, want %v",
						t.DisplayName(), d.Columns, want[t.DisplayName()])
				}
				var empty bool
				if err := conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT FROM "+d.QualifiedName()+")").Scan(&empty); err != nil {
					return err
				}
				if !empty {
					return pgerr.New(pgerr.ObjectNotInPrerequisiteState, "table %s already holds rows: a MoveTables fills an empty table", t.DisplayName())
				}
			}
			return nil
		}()
		if err != nil {
			return activityError(fmt.Errorf("target %s: %w", shard, err))
		}
	}
	return nil
}

// switchTables is SwitchTopology for a MoveTables' plan: it gives the
// plan's tables, in the stored topology, their placement of the target
// topology (their entries copied from it), by a compare-and-swap on the
// revision read and only if each table's placement there is still the
// source topology's. A retry that finds them already placed returns.
func (a *Actions) switchTables(ctx context.Context, plan workflows.ReshardPlan) (workflows.SwitchTopologyResult, error) {
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	before, err := topo.Parse(plan.SourceTopology)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	after, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	placed := func(top *topo.Topology) (atTarget, atSource bool) {
		atTarget, atSource = true, true
		for _, t := range plan.Tables {
			cur := top.Resolve(plan.Database, t.Schema, t.Name).Describe()
			atTarget = atTarget && cur == after.Resolve(plan.Database, t.Schema, t.Name).Describe()
			atSource = atSource && cur == before.Resolve(plan.Database, t.Schema, t.Name).Describe()
		}
		return atTarget, atSource
	}
	atTarget, atSource := placed(snap.Topology)
	if plan.Imports() && atTarget {
		// An imported table may already resolve to the target group by
		// inheritance: switched means it has the target's own entry.
		if atTarget, err = sameEntries(snap.Topology, plan); err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
	}
	switch {
	case atTarget:
		return workflows.SwitchTopologyResult{Revision: snap.Revision, Switched: time.Now()}, nil
	case !atSource && !plan.Imports():
		// An import's source topology places the tables on the external
		// source, which the stored one never does: the compare-and-swap
		// below, and the check that they land where planned, guard it.
		return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
			"the placement of the tables changed since MoveTables planned: nothing is switched")
	}
	entries := map[[2]string]any{}
	for _, t := range plan.Tables {
		if entries[[2]string{t.Schema, t.Name}], err = tableEntry(plan.TargetTopology, plan.Database, t.Schema, t.Name); err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
	}
	doc, err := placeTables(snap.Topology, plan.Database, entries, nil)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	next, err := topo.Parse(doc)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	if atTarget, _ := placed(next); !atTarget {
		// The stored topology's defaults changed since the plan: the
		// entries alone do not give the tables their planned placement.
		return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
			"the stored topology changed since MoveTables planned: the tables would not land where planned; nothing is switched")
	}
	return a.applySwitch(ctx, next, snap.Revision)
}

// sameEntries says whether each of the plan's tables has, in top, its own
// entry of the target topology.
func sameEntries(top *topo.Topology, plan workflows.ReshardPlan) (bool, error) {
	doc, err := json.Marshal(top)
	if err != nil {
		return false, activityError(err)
	}
	for _, t := range plan.Tables {
		have, err := tableEntry(doc, plan.Database, t.Schema, t.Name)
		if err != nil {
			return false, err
		}
		want, err := tableEntry(plan.TargetTopology, plan.Database, t.Schema, t.Name)
		if err != nil {
			return false, err
		}
		a, _ := json.Marshal(have)
		b, _ := json.Marshal(want)
		if have == nil || string(a) != string(b) {
			return false, nil
		}
	}
	return true, nil
}
