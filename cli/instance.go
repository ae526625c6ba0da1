package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
)

func newInstanceCommand() *cobra.Command {
	var f instanceFlags
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "instance",
		Short: "Run one Postgres instance with its sidecar, joining a shard through etcd",
		Long: `Run one Postgres instance of a shard, under pgmanager, with its sidecar, on a
host of its own. The instance joins --shard of --cluster through etcd: when no
primary of the shard is registered it creates a new database (initdb) and
becomes the shard's primary; otherwise it takes a base backup from the
registered primary and streams from it as a replica. An instance directory
that is already initialized is simply started again, in the role its data
says.

The sidecar registers the instance in the topology service with the addresses
it advertises. Secrets come from files only. SIGINT or SIGTERM stops the
sidecar, then Postgres (docs/commands.md, docs/operations.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			spec, err := f.check()
			if err != nil {
				return err
			}
			logger, err := newLogger(cmd.ErrOrStderr(), f.logLevel)
			if err != nil {
				return err
			}
			return runInstance(ctx, spec, metricsAddr, logger, cmd.ErrOrStderr())
		},
	}
	f.register(cmd.Flags())
	metricsFlag(cmd, &metricsAddr)
	return cmd
}

// instanceStopTimeout bounds the clean stop after a signal: the sidecar's
// calls in flight, then Postgres's fast shutdown.
const instanceStopTimeout = time.Minute

// runInstance runs the instance until ctx ends, then stops the sidecar
// and Postgres. It is what `tessera instance` runs once its flags are
// checked.
func runInstance(ctx context.Context, spec *instanceSpec, metricsAddr string, logger *slog.Logger, out io.Writer) (err error) {
	s, err := store.DialWith(ctx, spec.endpoints, spec.cluster, spec.etcd)
	if err != nil {
		return fmt.Errorf("connecting to etcd: %w", err)
	}
	defer s.Close()

	pgCfg := spec.pg
	pgCfg.Logger = logger
	pg, err := pgmanager.New(pgCfg)
	if err != nil {
		return err
	}
	var sc *sidecar.Server
	// Metrics are served from the start, so that a taken port fails it;
	// the sidecar's appear once it runs.
	var running atomic.Pointer[sidecar.Server]
	served, err := serveMetrics(metricsAddr, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if s := running.Load(); s != nil {
			return s.Registry().Gather()
		}
		return nil, nil
	}))
	if err != nil {
		return err
	}
	defer func() {
		// The sidecar first: it holds connections to Postgres and its
		// registration tells routers the instance is there.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), instanceStopTimeout)
		defer cancel()
		if sc != nil {
			sc.Stop(sctx)
		}
		if cerr := pg.Close(sctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stopping Postgres: %w", cerr))
		}
	}()

	unlock, err := initInstance(ctx, s, pg, spec)
	if err != nil {
		return err
	}
	// A new primary holds the shard's join lock until it has registered,
	// so that an instance started beside it finds it and copies it.
	defer unlock()
	if err := pg.Start(ctx); err != nil {
		return fmt.Errorf("starting Postgres: %w", err)
	}
	scCfg := spec.sc
	scCfg.Manager, scCfg.Store, scCfg.Logger = pg, s, logger
	if sc, err = sidecar.New(scCfg); err != nil {
		return err
	}
	if err := sc.Start(ctx); err != nil {
		sc = nil // Start cleans up after itself
		return fmt.Errorf("starting the sidecar: %w", err)
	}
	unlock()
	running.Store(sc)
	if served != "" {
		fmt.Fprintf(out, "instance metrics on http://%s/metrics\n", served)
	}
	role := ""
	if h := sc.LatestHealth(); h != nil {
		role = h.Role
	}
	fmt.Fprintf(out, "instance %s of shard %s (%s) up: postgres %s, sidecar %s\n",
		spec.sc.InstanceID, spec.sc.ShardUID, role, spec.sc.PostgresAddr, sc.Addr())
	<-ctx.Done()
	fmt.Fprintf(out, "stopping instance %s ...\n", spec.sc.InstanceID)
	return nil
}

// initInstance creates the data directory unless it exists: a new primary
// when the shard has none, else a replica of the one registered. It
// decides under the shard's join lock (store.LockShardJoin); when it
// created a new primary the lock is still held, and unlock, to call once
// the sidecar has registered, releases it.
func initInstance(ctx context.Context, s *store.Store, pg *pgmanager.Instance, spec *instanceSpec) (unlock func(), err error) {
	noLock := func() {}
	if pg.Initialized() {
		return noLock, nil
	}
	shard, self := spec.sc.ShardUID, spec.sc.InstanceID
	// release, not the result unlock: a failure returns noLock, and the
	// lock must still be released then.
	release, err := s.LockShardJoin(ctx, shard)
	if err != nil {
		return noLock, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	primary, found, err := registeredPrimary(ctx, s, shard, self)
	if err != nil {
		return noLock, err
	}
	if found {
		// A primary exists: others may join beside this one at once.
		release()
		if err := pg.InitReplica(ctx, primary); err != nil {
			return noLock, fmt.Errorf("base backup from shard %s's primary %s: %w", shard, primary, err)
		}
		return noLock, nil
	}
	// No primary registered. If the shard's state names one, it is down,
	// not absent: a new database here would split the shard in two.
	st, err := s.GetShardState(ctx, shard)
	if err != nil {
		return noLock, fmt.Errorf("reading shard %s's state: %w", shard, err)
	}
	if st.Primary != "" && st.Primary != self {
		return noLock, fmt.Errorf("shard %s's primary is %s, which is not registered: start it (or fail over) before adding instance %s", shard, st.Primary, self)
	}
	creator, err := s.ClaimShardCreation(ctx, shard, self)
	if err != nil {
		return noLock, err
	}
	if creator != self {
		return noLock, fmt.Errorf("shard %s's database was created by instance %s, which is not registered: start it before adding instance %s", shard, creator, self)
	}
	if err := pg.InitPrimary(ctx); err != nil {
		return noLock, fmt.Errorf("initdb: %w", err)
	}
	return release, nil
}

// registeredPrimary finds the Postgres address the shard's registered
// primary sidecar advertises.
func registeredPrimary(ctx context.Context, s *store.Store, shard, self string) (pgmanager.Endpoint, bool, error) {
	recs, err := s.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return pgmanager.Endpoint{}, false, fmt.Errorf("listing the registered sidecars: %w", err)
	}
	for _, r := range recs {
		if r.ShardUID != shard || r.Role != store.RolePrimary || r.InstanceID == self {
			continue
		}
		host, portStr, err := net.SplitHostPort(r.PostgresAddr)
		port, perr := strconv.Atoi(portStr)
		if err != nil || perr != nil {
			return pgmanager.Endpoint{}, false, fmt.Errorf("shard %s's primary %s advertises Postgres at %q, not host:port", shard, r.InstanceID, r.PostgresAddr)
		}
		return pgmanager.Endpoint{Host: host, Port: port}, true, nil
	}
	return pgmanager.Endpoint{}, false, nil
}
