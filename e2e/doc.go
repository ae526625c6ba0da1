// Package e2e holds Tessera's end-to-end tests: the only package whose
// tests start a real Temporal server (linking it makes a large, slow test
// binary, so it is built once, here, and run without the race detector).
// They run failover, switchover and durability workflows through real
// workers against real Postgres, sidecars, etcd and routers, and test the
// embedded Temporal server of `tessera dev`.
package e2e
