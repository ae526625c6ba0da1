// Package replicator owns data movement between shards: the bottom layer
// of the Replicator that MoveTables, Reshard and OnlineDDL workflows drive.
//
// It owns
//   - the binary COPY row router (CopyRouter): it splits a binary COPY
//     stream among target shards by the target topology's shard function,
//     decoding only the shard-key field of each row and forwarding the
//     row's bytes unchanged;
//   - the consistent, resumable copy (OpenSnapshot, CopyTable): a logical
//     replication slot created with an exported snapshot gives the copy's
//     snapshot and the change stream's start LSN together; tables are
//     copied in batches ordered by their primary key (or a non-null unique
//     key) and each target records its progress in _tessera.copy_progress
//     in the same transaction as each batch, so a killed copy resumes
//     where its targets left off;
//   - change data capture (Stream): one pgoutput decoder per source shard,
//     in binary mode, fanning each change out by the target placement and
//     applying consecutive source transactions (a batch) on each target
//     they touch in one transaction that also advances the target's
//     replication origin, so a restart neither skips nor re-applies; the
//     slot is confirmed only up to what every target has durably applied;
//     StopAt stops it exactly at a source LSN;
//   - VDiff (Differ): compares a table on the sources with the targets at a
//     consistent point (OpenDiffSnapshot, Stream.StopAt, BeginDiffRead),
//     chunk by chunk on counts and md5 sums per owning target, row by row
//     only where a chunk differs; its report (DiffReport) names every
//     missing, extra, changed and wrong-shard key and is also the state a
//     stopped diff resumes from.
//
// Routing keys come from topo and topo/shardfunc, never from a hash of this
// package's own: a row lands on the shard a router would send its queries
// to. The package talks to Postgres directly (pgx, pglogrepl), not through
// routers or sidecars, and knows nothing of workflows: Temporal activities
// call into it.
package replicator
