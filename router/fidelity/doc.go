// Package fidelity checks that the router answers exactly as Postgres: it
// runs PostgreSQL's own regression files (shared/pg_regress) through a
// router in front of a one-shard cluster, and in front of three shards
// where the regression tables are unsharded, and compares with Postgres's
// expected output; and it runs statements on a plain database and through
// a router in front of four shards holding the same data, where every
// answer must match or be refused with 0A000 (docs/fidelity.md): a corpus
// (testdata, TestDifferential), random statements shrunk to the smallest
// that still differs (TestQueryGen), and TPC-H's 22 queries over a data
// set generated from the specification (TestTPCH). These three share one
// cluster (cluster_test.go). With CI=true a missing suite or psql fails
// the tests instead of skipping them. BenchmarkEngine compares the
// engine's reads over four shards with one Postgres. It holds tests and
// benchmarks only.
package fidelity
