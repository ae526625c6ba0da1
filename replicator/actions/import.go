package actions

import (
	"context"
	"os"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// An import is a MoveTables whose source is a plain Postgres outside the
// cluster: one pseudo-shard, workflows.ImportSourceShard, reached by the
// connection string in the plan's secret file. Everything else (copy,
// streams, VDiff, fence, switch, cleanup) is the group-to-group path.

// importConnector reaches the import's external source by the
// connection string its secret file holds, and every other shard as base
// does.
type importConnector struct {
	base   Connector
	secret string
}

// ConnString implements Connector. The string read holds a password: it
// is returned, never logged; errors name the file only.
func (c importConnector) ConnString(ctx context.Context, shard, database string) (string, error) {
	if shard != workflows.ImportSourceShard {
		return c.base.ConnString(ctx, shard, database)
	}
	raw, err := os.ReadFile(c.secret)
	if err != nil {
		return "", pgerr.New(pgerr.ConfigFileError, "reading the import's connection secret: %v", err)
	}
	conn := strings.TrimSpace(string(raw))
	if conn == "" {
		return "", pgerr.New(pgerr.ConfigFileError, "the import's connection secret %s is empty", c.secret)
	}
	return conn, nil
}

// forPlan is a with an import's external source reachable: every
// activity given a plan reaches its shards through it.
func (a *Actions) forPlan(plan workflows.ReshardPlan) *Actions {
	if !plan.Imports() {
		return a
	}
	b := *a
	b.Conn = importConnector{base: a.Conn, secret: plan.ImportSecret}
	return &b
}

// planImport is planMove for an import: the source is the external
// Postgres, and the source topology (what the reverse streams route by)
// is the stored one with the tables in a group of their own on it.
func planImport(top *topo.Topology, in workflows.PlanMoveTablesInput) (workflows.ReshardPlan, error) {
	m := in.Input
	plan := workflows.ReshardPlan{Key: workflows.MoveTablesKey(in.WorkflowID), Database: m.Database,
		ShardGroup: workflows.ImportSourceShard, TargetShardGroup: m.TargetShardGroup, ImportSecret: m.Source.ConnSecret,
		Sources: []string{workflows.ImportSourceShard}}
	if m.Source.ConnSecret == "" || !strings.HasPrefix(m.Source.ConnSecret, "/") {
		return plan, refuse(pgerr.InvalidParameterValue, "source.conn_secret must be the absolute path of a file on the workers holding the connection string")
	}
	if _, ok := top.Group(workflows.ImportSourceShard); ok {
		return plan, refuse(pgerr.FeatureNotSupported, "the topology has a shard group named %s, the name an import uses for its source", workflows.ImportSourceShard)
	}
	tables, err := tableNames(m.Tables)
	if err != nil {
		return plan, err
	}
	plan.Tables = tables
	target, ok := top.Group(m.TargetShardGroup)
	if !ok {
		return plan, refuse(pgerr.UndefinedObject, "shard group %q does not exist", m.TargetShardGroup)
	}
	plan.Targets = target.Shards()
	for _, t := range plan.Tables {
		if top.Resolve(m.Database, t.Schema, t.Name).Group == target {
			if _, listed := listedTable(top, m.Database, t); listed {
				return plan, refuse(pgerr.ObjectNotInPrerequisiteState, "%s is already placed in shard group %s", t.DisplayName(), m.TargetShardGroup)
			}
		}
	}
	if plan.TargetTopology, err = targetPlacement(top, m, plan.Tables); err != nil {
		return plan, err
	}
	// The source topology: the stored one, plus the import's group.
	source, err := placeTablesWith(top, m.Database, plan.Tables, map[string]any{"shard_group": workflows.ImportSourceShard},
		map[string]any{"uid": workflows.ImportSourceShard, "key_ranges": []any{map[string]any{"shard_uid": workflows.ImportSourceShard}}})
	if err != nil {
		return plan, err
	}
	if _, err := topo.Parse(source); err != nil {
		return plan, activityError(err)
	}
	plan.SourceTopology = source
	return plan, fillShardColumns(&plan)
}

// listedTable is a table's own entry in the topology, if it has one.
func listedTable(top *topo.Topology, database string, t workflows.ReshardTable) (*topo.Table, bool) {
	db := top.Databases[database]
	if db == nil || db.Schemas[t.Schema] == nil {
		return nil, false
	}
	tb, ok := db.Schemas[t.Schema].Tables[t.Name]
	return tb, ok
}

// checkImportSource refuses an external Postgres whose wal_level is not
// logical: its changes could not be streamed.
func (a *Actions) checkImportSource(ctx context.Context, plan workflows.ReshardPlan) error {
	conn, _, err := a.connect(ctx, workflows.ImportSourceShard, plan.Database)
	if err != nil {
		return err
	}
	defer closeAll(conn)
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return activityError(err)
	}
	if level != "logical" {
		return refuse(pgerr.ObjectNotInPrerequisiteState,
			"the external Postgres has wal_level = %s: an import streams its changes, which needs wal_level = logical (set it and restart that server)", level)
	}
	return nil
}
