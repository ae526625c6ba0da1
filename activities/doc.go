// Package activities holds the retryable, idempotent steps that Tessera's
// workflows are made of: each talks to sidecars, pgmanager or the topology
// service and can run again safely after a partial failure.
package activities
