// Package router accepts Postgres wire-protocol connections from clients,
// authenticates them as Postgres would, plans each statement against the
// data topology (package planner) and sends the work to the sidecars of
// the shards that hold the rows. Routers are stateless: run as many as you
// like.
//
// The hot path decodes as little as it can (seed 003): client messages are
// kept as the bytes that arrived, only the fields routing needs are read,
// and answers from a single shard are copied to the client untouched.
//
// Goroutines: Server.Serve runs one goroutine per client connection, which
// owns that connection and its session (settings, prepared statements,
// sidecar streams) for its whole life; nothing else touches them, except
// CancelRequest, which reaches a session only through its cancel key.
//
// Files: server.go (listener, lifecycle, registration, admin queries),
// startup.go (startup packet, TLS, cancel), admission.go (timeout and
// limits before a session), hba.go (host-based rules), auth.go and
// scram.go (authentication), roles.go (role cache), shards.go (sidecar discovery),
// conn.go (the message loop and backend streams), simple.go and
// extended.go (the two query protocols), ownnames.go (a pinned session's
// prepared statements under the client's names), route.go and routed.go
// (from a plan to targets), exec.go (running a statement on one, several or all
// shards), gather.go and gather_copy.go (reads Postgres computes over rows
// gathered from the shards), forward.go (passing answers through, merging scatter answers),
// txn.go (transactions), atomic.go (their two-phase commit across
// shards, package twophase), follow.go (the relations and cursors a session
// made, and where they are), settings.go (SET/SHOW and Tessera's settings),
// copy.go (COPY FROM STDIN), copyinto.go (COPY FROM STDIN into a sharded
// table, split by shard key with package copysplit), schema.go (shard-key column types),
// sequence.go, sequence_insert.go and sequence_select.go (sequences that
// feed tables beyond the authoritative shard: blocks of values, INSERTs
// filled in, nextval/currval/lastval answered),
// buffer.go and signal.go (holding statements while a shard's primary
// changes), tablebuffer.go (while a cutover moves tables), revision.go
// (the topology revision the router reports in its discovery record),
// wire.go (message framing), drain.go (leaving without failing clients'
// statements), stmtstat.go (each statement's accounting), metrics.go
// (Prometheus metrics), querystats.go (tessera.query_stats). Planning
// lives in package planner.
package router
