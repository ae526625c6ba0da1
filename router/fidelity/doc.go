// Package fidelity checks that the router answers exactly as Postgres: it
// runs PostgreSQL's own regression files (shared/pg_regress) through a
// router in front of a one-shard cluster, and in front of three shards
// where the regression tables are unsharded, and compares with Postgres's
// expected output. With CI=true a missing suite or psql fails the tests
// instead of skipping them. It holds tests only.
package fidelity
