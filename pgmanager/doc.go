// Package pgmanager owns one real Postgres instance: initdb, configuration,
// start and stop, replication from a primary, promotion and pg_rewind.
package pgmanager
