// Package temporal runs a complete Temporal server, with its Web UI, inside
// the calling process, for `tessera dev` (a whole local cluster in one
// command) and for the integration tests of Tessera's workflows.
//
// It owns everything about that embedded server: its configuration, its
// SQLite persistence (in memory, or in one file so that running `tessera dev`
// again resumes the workflows it left), the namespaces it creates, the ports
// of its internal services and its logging.
//
// It is a package of its own, imported only by the dev command and by the one
// integration-test package, because the Temporal server is very large (it adds
// minutes to a cold build and gigabytes to a test binary). Production
// binaries — router, sidecar, pgmanager, worker — talk to an external
// Temporal cluster through the SDK and must never link the server; keeping it
// here, and nowhere else, is what guarantees that. Every test that needs a
// real server, this package's own included, lives in package e2e, so that
// only one test binary pays for linking it.
//
// A minimal use:
//
//	srv, err := temporal.Start(ctx, temporal.Config{DBFile: filepath.Join(dataDir, "temporal.db")})
//	if err != nil {
//		return err
//	}
//	defer srv.Stop()
//	// dial srv.FrontendAddr() with go.temporal.io/sdk/client; browse srv.UIURL()
package temporal
