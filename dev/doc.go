// Package dev runs a whole Tessera cluster on 127.0.0.1 in one process,
// for `tessera dev`: an embedded etcd holding the topology, shards of real
// Postgres (a primary and streaming replicas each, under pgmanager) with a
// sidecar per instance, and, when the caller plugs one in, an embedded
// Temporal server with its Web UI.
//
// Everything lives under one data directory, so running again resumes the
// same cluster; cluster.json in it says where everything listens. The
// Temporal server is plugged in by package main rather than imported here,
// so that this package's tests and the production components never link it.
package dev
