package pgmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ErrClosed is returned by operations on an Instance after Close.
var ErrClosed = errors.New("pgmanager: instance is closed")

// ErrNotRunning is returned by operations that need a running server.
var ErrNotRunning = errors.New("pgmanager: postgres is not running")

// Instance owns one Postgres instance: its directory, its configuration
// and, while started, its postmaster process. Methods are safe for
// concurrent use; lifecycle operations (Init*, Start, Stop, Rewind, Close)
// are serialised.
type Instance struct {
	cfg  Config
	bin  binaries
	user osUser
	log  *slog.Logger
	// networks are Config.AllowedNetworks, parsed, for pg_hba.conf.
	networks []netip.Prefix

	// opMu serialises lifecycle operations, so that a Stop cannot
	// interleave with a Start or a crash restart.
	opMu sync.Mutex

	mu          sync.Mutex
	proc        *process // the most recently started postmaster; nil before the first start
	wantRunning bool     // Start was called and Stop was not: crash restarts apply
	closed      bool
	restart     *time.Timer // pending crash restart
	backoff     time.Duration
	lastCrash   time.Time
	// wg counts supervisor goroutines and pending restart timers, so Close
	// can wait until nothing of ours runs.
	wg sync.WaitGroup
}

// New validates cfg, fills in its defaults, resolves the OS user and
// discovers the Postgres binaries. It touches nothing on disk.
func New(cfg Config) (*Instance, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	cfg.Settings = maps.Clone(cfg.Settings)
	cfg.AllowedNetworks = slices.Clone(cfg.AllowedNetworks)
	networks, _ := ParseNetworks(cfg.AllowedNetworks) // normalize checked them
	u, err := resolveOSUser(cfg.OSUser)
	if err != nil {
		return nil, err
	}
	cfg.OSUser = u.name
	if err := u.checkTraversable(cfg.Dir); err != nil {
		return nil, err
	}
	bin, err := findBinaries(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	cfg.BinDir = bin.dir
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Instance{
		cfg:  cfg,
		bin:  bin,
		user: u,
		log:  logger.With("instance", cfg.InstanceID),

		networks: networks,
	}, nil
}

// Config returns the normalised configuration (defaults filled in, Dir
// absolute, BinDir and OSUser as discovered).
func (i *Instance) Config() Config {
	c := i.cfg
	c.Settings = maps.Clone(i.cfg.Settings)
	return c
}

// Version is the Postgres version of the binaries in use, e.g. "15.18".
func (i *Instance) Version() string { return i.bin.version }

// DataDir is PGDATA, Dir/data.
func (i *Instance) DataDir() string { return filepath.Join(i.cfg.Dir, "data") }

// SocketDir is the directory of the unix socket, Dir/run.
func (i *Instance) SocketDir() string { return i.runDir() }

// Port is the TCP port, also part of the unix socket's name.
func (i *Instance) Port() int { return i.cfg.Port }

// Endpoint is the TCP address replicas use to reach this instance:
// Config.Host and Port, so Host must be an address others can connect to
// (not a wildcard such as "*") for it to be useful.
func (i *Instance) Endpoint() Endpoint { return Endpoint{Host: i.cfg.Host, Port: i.cfg.Port} }

// LogPath is the file Postgres's output is appended to, Dir/postgres.log.
func (i *Instance) LogPath() string { return i.logPath() }

// ConnConfig returns a libpq connection string for database as user over
// the unix socket; "" means "postgres" for either. This is how the sidecar
// connects: the socket directory is private (0700, owned by the OS user)
// and pg_hba.conf trusts socket connections, so only a process that can
// enter the directory (the sidecar, as root or as the same OS user) gets
// in, and it needs no password.
func (i *Instance) ConnConfig(database, user string) string {
	if database == "" {
		database = "postgres"
	}
	if user == "" {
		user = "postgres"
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable",
		conninfoQuote(i.runDir()), i.cfg.Port, conninfoQuote(database), conninfoQuote(user))
}

// Initialized reports whether the data directory holds a cluster. The
// initialisers build it under another name and rename it into place when
// complete, so a half-finished initdb or base backup never counts.
func (i *Instance) Initialized() bool {
	return exists(filepath.Join(i.DataDir(), "PG_VERSION"))
}

func (i *Instance) runDir() string     { return filepath.Join(i.cfg.Dir, "run") }
func (i *Instance) logPath() string    { return filepath.Join(i.cfg.Dir, "postgres.log") }
func (i *Instance) pgpassPath() string { return filepath.Join(i.cfg.Dir, "pgpass") }
func (i *Instance) partialDir() string { return filepath.Join(i.cfg.Dir, "data.partial") }
func (i *Instance) isStandby() bool    { return exists(filepath.Join(i.DataDir(), "standby.signal")) }

func (i *Instance) checkOpen() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closedErr()
}

// closedErr is ErrClosed after Close; the caller holds mu.
func (i *Instance) closedErr() error {
	if i.closed {
		return ErrClosed
	}
	return nil
}

// prepareDir creates the instance directory and the files outside PGDATA
// (socket directory, password file, log), all owned by the OS user.
func (i *Instance) prepareDir() error {
	if err := os.MkdirAll(filepath.Dir(i.cfg.Dir), 0o755); err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	// Check again: the ancestors may have changed since New.
	if err := i.user.checkTraversable(i.cfg.Dir); err != nil {
		return err
	}
	if err := os.Mkdir(i.cfg.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pgmanager: %w", err)
	}
	if err := i.user.chown(i.cfg.Dir); err != nil {
		return err
	}
	// The socket directory is the access control for trusted local
	// connections, so its mode is enforced every time.
	if err := os.MkdirAll(i.runDir(), 0o700); err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	if err := os.Chmod(i.runDir(), 0o700); err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	if err := i.user.chown(i.runDir()); err != nil {
		return err
	}
	if err := i.writePgpass(); err != nil {
		return err
	}
	f, err := os.OpenFile(i.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	f.Close()
	return i.user.chown(i.logPath())
}
