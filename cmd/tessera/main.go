// Command tessera is Tessera's single binary: every component and every
// operator tool is a subcommand (see package cli). Run `tessera --help`.
//
// Only this package links the embedded Temporal server, for `tessera
// dev`; the components' packages and their tests never do.
package main

import (
	"context"
	"log/slog"

	"github.com/tesseradb/tessera/cli"
	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/dev/temporal"
	"github.com/tesseradb/tessera/workflows"
)

func main() {
	cli.Main(cli.Options{Temporal: startTemporal})
}

// startTemporal adapts temporal.Start to dev's hook.
func startTemporal(ctx context.Context, dbFile string, frontendPort, uiPort int, _ *slog.Logger) (dev.TemporalServer, error) {
	// Temporal's own logging is very verbose: only its errors are shown.
	srv, err := temporal.Start(ctx, temporal.Config{DBFile: dbFile, FrontendPort: frontendPort, UIPort: uiPort,
		SearchAttributes: workflows.SearchAttributes})
	if err != nil {
		return nil, err
	}
	return srv, nil
}
