// Package sidecar runs beside one Postgres instance and is the only way
// routers and operations reach it.
//
// It serves the gRPC API in sidecarpb. A Session stream carries one
// router session's batches of Postgres frontend messages; the answers are
// the backend's own message bytes, streamed in chunks as they arrive and
// never decoded beyond message framing (seed 003). Connections come from a
// pool per (database, user) over the instance's private unix socket, and
// are held per statement, per transaction or per session. Prepared
// statements are named by content, so a statement any session prepared is
// re-prepared on whichever backend lacks it. Autocommit reads of many
// sessions share a few connections, pipelined. Health is pushed to every
// subscriber on change and periodically; operation RPCs (promote, fence,
// rewind, ...) delegate to the Manager, a pgmanager.Instance. Every call
// must carry the cluster's shared secret; TLS is optional.
//
// Sessions travel on the Session RPC, on the framed session port (TCP
// or the unix socket), or in-process when the router runs in the
// sidecar's own process (tessera dev): the same session, by function
// call.
//
// Files: server.go (lifecycle, registration), session.go (the Session
// RPC and pinning), framed.go and framecodec.go (the framed session
// port), inprocess.go (in-process sessions), async.go (messages from an
// idle pinned backend), pool.go and pools.go (pooling), pipeline.go
// (autocommit reads of many sessions pipelined on shared connections),
// backend.go (one Postgres connection), sendwait.go (a request sent from
// inside the wait for its answer), wire.go (message framing), health.go,
// fence.go (the gate that refuses client batches while fenced),
// depose.go (following the shard's state; a deposed primary fences
// itself), isolation.go (the gate also closes while etcd is out of
// reach), ops.go, cancel.go, auth.go, client.go (the Go client),
// metrics.go (Prometheus metrics, read when scraped).
package sidecar
