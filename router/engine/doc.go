// Package engine runs the router's side of a read that several shards
// answer: a plan (Plan, built by the planner) becomes a tree of small
// operators behind one interface, Operator, each pulling the rows of its
// inputs one at a time.
//
// A row is a wire DataRow as a shard sent it; operators read only the
// columns they need (sort keys, aggregate partials), and a row that no
// operator changed is forwarded as its original bytes. Values are read in
// the format the client's Bind asked for (text or binary), and only for
// types whose encoding the engine reads exactly as Postgres does: the
// planner refuses the rest (0A000) before anything runs.
//
// The operators:
//   - Source: one shard's rows, in the order it sent them.
//   - Concat: the inputs' rows, one input after another.
//   - Merge: a k-way merge of inputs each sorted by the same keys (every
//     shard ran the statement's ORDER BY), streaming: it holds one row per
//     input.
//   - Aggregate: final aggregation of partial aggregates by group key
//     (count as a sum of counts, sum, min, max, bool_and, bool_or), and
//     DISTINCT as an aggregation with no aggregates. Groups are compared
//     by their encoded bytes, which is Postgres's equality for the key
//     types the planner lets through.
//   - Sort: orders the aggregated rows (ORDER BY over the final answer).
//   - Limit: OFFSET and LIMIT.
//
// The router feeds the operators each shard's rows as they arrive (its
// own Operator per shard, flow-controlled); Source is the same over rows
// in hand. What Sort and Aggregate hold is counted against a Memory, the
// query's budget within the router's (memory.go); past it they spill to
// files of DataRows (spill.go): Sort as an external merge sort
// (sortspill.go), Aggregate by hash partitions (aggspill.go).
//
// The package depends on nothing of the router's: its inputs are byte
// slices, its output DataRow messages.
package engine
