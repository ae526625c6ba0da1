// Package worker runs a Temporal worker that registers Tessera's workflows
// and activities on the "tessera" task queue.
package worker
