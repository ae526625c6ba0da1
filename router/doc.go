// Package router accepts Postgres wire-protocol connections from clients,
// authenticates them, plans each statement against the data topology and
// sends the work to the sidecars of the shards that hold the rows, merging
// what comes back. Routers are stateless: run as many as you like.
package router
