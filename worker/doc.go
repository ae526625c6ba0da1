// Package worker runs a Temporal worker that registers Tessera's workflows
// and activities on the "tessera" task queue, announces itself in the
// topology service, and, when asked, runs an admin (package admin) that
// starts those workflows when shards need them. Before it polls, it makes
// sure the namespace has the search attributes the workflows set
// (searchattr.go).
package worker
