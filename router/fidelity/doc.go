// Package fidelity checks that the router answers exactly as Postgres: it
// runs PostgreSQL's own regression files (shared/pg_regress) through a
// router in front of a one-shard cluster and compares with Postgres's
// expected output. It holds tests only.
package fidelity
