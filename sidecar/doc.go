// Package sidecar runs beside one Postgres instance and is the only way
// routers and operations reach it: it pools connections, executes router
// requests and streams back Postgres's own response bytes, and reports the
// instance's health and role.
package sidecar
