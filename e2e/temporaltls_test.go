package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/tlsfiles/tlstest"
	"github.com/tesseradb/tessera/worker"
)

// TestWorkerTemporalTLSRefusesPlaintext: a worker told to reach Temporal
// over TLS (tessera worker --temporal-ca) does not start against a
// plaintext frontend (the package's server), rather than falling back to
// plaintext; without TLS it starts.
func TestWorkerTemporalTLSRefusesPlaintext(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "temporal")
	tlsConfig, err := tlsfiles.Client{CA: ca.File}.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{
		TemporalAddr:  temporalSrv.FrontendAddr(),
		EtcdEndpoints: cluster.Info().Etcd,
		Cluster:       cluster.Info().Cluster,
		Secret:        cluster.Secret(),
		ID:            "tls-refused",
		TemporalTLS:   tlsConfig,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w, err := worker.Start(ctx, cfg); err == nil {
		w.Stop(context.Background())
		t.Fatal("a worker with Temporal TLS started against a plaintext frontend")
	} else {
		t.Logf("refused: %v", err)
	}
	cfg.TemporalTLS, cfg.ID = nil, "tls-plain"
	w, err := worker.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("the same worker without TLS: %v", err)
	}
	w.Stop(context.Background())
}
