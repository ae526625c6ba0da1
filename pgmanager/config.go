package pgmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Endpoint is the TCP address of a primary that an instance replicates
// from (InitReplica, FollowPrimary, Rewind). pgmanager connects to it as
// superuser "postgres" with Config.SuperuserPassword, so every instance of
// a cluster must share that password.
type Endpoint struct {
	Host string
	Port int
}

// String returns host:port, for logs and errors.
func (e Endpoint) String() string { return fmt.Sprintf("%s:%d", e.Host, e.Port) }

func (e Endpoint) validate() error {
	if e.Host == "" {
		return errors.New("pgmanager: primary endpoint: empty host")
	}
	if strings.ContainsAny(e.Host, "\x00\n\r '\\") {
		return fmt.Errorf("pgmanager: primary endpoint: host %q contains a character that cannot appear in a connection string unquoted", e.Host)
	}
	if e.Port < 1 || e.Port > 65535 {
		return fmt.Errorf("pgmanager: primary endpoint: port %d out of range 1..65535", e.Port)
	}
	return nil
}

// Config describes one Postgres instance. New validates it once and fills
// in the defaults; the Config that Instance.Config returns is that
// normalised copy.
type Config struct {
	// InstanceID names the instance within its cluster: lower-case letters,
	// digits, '_' and '-', at most 63 bytes (Postgres's NAMEDATALEN). It is
	// the application_name this instance uses when it replicates (so it is
	// what synchronous_standby_names refers to) and, with '-' turned into
	// '_', the name of its physical replication slot on the primary.
	InstanceID string
	// Dir is the instance directory, owned by pgmanager: Dir/data is
	// PGDATA, Dir/run the private unix socket directory, Dir/pgpass the
	// password file used to reach a primary, Dir/postgres.log the server's
	// output. Relative paths are made absolute.
	Dir string
	// Host is the TCP listen address (listen_addresses): one host name or
	// IP, or "*" or 0.0.0.0 for every interface; default 127.0.0.1.
	Host string
	// AllowedNetworks are CIDRs (10.0.0.0/8) besides loopback from which
	// pg_hba.conf accepts password (scram-sha-256) connections, normal and
	// replication: where the shard's other instances and the sidecars'
	// peers live when they run on other hosts. Empty: loopback only. With
	// ssl on in Settings, these networks must connect with TLS.
	AllowedNetworks []string
	// Port is the TCP port and the number in the unix socket's name.
	Port int
	// BinDir holds the Postgres server binaries; "" discovers them (see
	// findBinaries for the order).
	BinDir string
	// OSUser is the unprivileged OS user Postgres runs as. Postgres refuses
	// to run as root, so when pgmanager runs as root it runs initdb,
	// postgres, pg_basebackup and pg_rewind as this user (default
	// "postgres"); otherwise it must be "" or the current user.
	OSUser string
	// SuperuserPassword is the password of superuser "postgres", used for
	// TCP connections (scram-sha-256) and replication; default "postgres".
	// It is kept out of configuration files and logs: replication reads it
	// from Dir/pgpass.
	SuperuserPassword string
	// Settings are extra postgresql.conf settings; they override
	// pgmanager's defaults. Settings pgmanager derives from other fields or
	// manages itself (port, listen_addresses, primary_conninfo,
	// synchronous_standby_names, default_transaction_read_only, ...) are
	// refused, because overriding them would silently break pgmanager.
	Settings map[string]string
	// Logger receives pgmanager's own events; nil discards them. Postgres's
	// output goes to Dir/postgres.log, not here.
	Logger *slog.Logger
	// RestartOnCrash makes the supervisor restart postgres, with backoff
	// (1s, 2s, 4s, ... at most 10s), when it exits without Stop having been
	// called.
	RestartOnCrash bool
}

// maxSocketPath bounds the unix socket path (Dir/run/.s.PGSQL.<port>). The
// kernel's sun_path holds 108 bytes including the terminating NUL; staying
// under 107 keeps a byte of margin.
const maxSocketPath = 106

var instanceIDRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

var settingNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_]+)?$`)

// reservedSettings may not appear in Config.Settings: pgmanager derives
// them from Config, manages them through its own methods, or depends on
// their value (the unix socket, stderr going to postgres.log).
var reservedSettings = map[string]string{
	"listen_addresses":              "set Config.Host",
	"port":                          "set Config.Port",
	"unix_socket_directories":       "pgmanager's socket directory is Dir/run",
	"unix_socket_permissions":       "the socket directory is private to the OS user",
	"logging_collector":             "postgres's stderr goes to Dir/postgres.log",
	"primary_conninfo":              "use InitReplica, FollowPrimary or Rewind",
	"primary_slot_name":             "use InitReplica, FollowPrimary or Rewind",
	"synchronous_standby_names":     "use SetSynchronousStandbys",
	"default_transaction_read_only": "use Fence and Unfence",
	"data_directory":                "the data directory is Dir/data",
	"config_file":                   "the data directory is Dir/data",
	"hba_file":                      "pgmanager writes pg_hba.conf",
	"ident_file":                    "pgmanager writes the configuration files",
	"include":                       "not a setting",
	"include_if_exists":             "not a setting",
	"include_dir":                   "not a setting",
}

// normalize checks cfg and returns a copy with defaults filled in. It does
// not touch the filesystem beyond making Dir absolute.
func (cfg Config) normalize() (Config, error) {
	if cfg.InstanceID == "" {
		return cfg, errors.New("pgmanager: Config.InstanceID is required")
	}
	if !instanceIDRE.MatchString(cfg.InstanceID) {
		return cfg, fmt.Errorf("pgmanager: Config.InstanceID %q: want 1 to 63 of [a-z0-9_-]", cfg.InstanceID)
	}
	if cfg.Dir == "" {
		return cfg, errors.New("pgmanager: Config.Dir is required")
	}
	if strings.ContainsAny(cfg.Dir, "\x00\n\r") {
		return cfg, fmt.Errorf("pgmanager: Config.Dir %q contains a control character", cfg.Dir)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return cfg, fmt.Errorf("pgmanager: Config.Dir: %w", err)
	}
	cfg.Dir = dir
	if cfg.Port < 1 || cfg.Port > 65535 {
		if cfg.Port == 0 {
			return cfg, errors.New("pgmanager: Config.Port is required")
		}
		return cfg, fmt.Errorf("pgmanager: Config.Port %d out of range 1..65535", cfg.Port)
	}
	if sock := socketPath(cfg.Dir, cfg.Port); len(sock) > maxSocketPath {
		return cfg, fmt.Errorf("pgmanager: unix socket path %s is %d bytes; the kernel limit leaves at most %d: use a shorter Config.Dir",
			sock, len(sock), maxSocketPath)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if strings.ContainsAny(cfg.Host, "\x00\n\r '\\") {
		return cfg, fmt.Errorf("pgmanager: Config.Host %q contains a space, quote, backslash or control character", cfg.Host)
	}
	if cfg.SuperuserPassword == "" {
		cfg.SuperuserPassword = "postgres"
	}
	// initdb reads the first line of --pwfile, so a line break would
	// silently truncate the password.
	if strings.ContainsAny(cfg.SuperuserPassword, "\x00\n\r") {
		return cfg, errors.New("pgmanager: Config.SuperuserPassword contains a line break or NUL")
	}
	settings := make(map[string]string, len(cfg.Settings))
	for k, v := range cfg.Settings {
		name := strings.ToLower(strings.TrimSpace(k))
		if why, ok := reservedSettings[name]; ok {
			return cfg, fmt.Errorf("pgmanager: Config.Settings may not set %s: %s", name, why)
		}
		if !settingNameRE.MatchString(name) {
			return cfg, fmt.Errorf("pgmanager: Config.Settings: %q is not a setting name", k)
		}
		if strings.ContainsAny(v, "\x00\n\r") {
			return cfg, fmt.Errorf("pgmanager: Config.Settings[%s] contains a line break or NUL", name)
		}
		if _, dup := settings[name]; dup {
			return cfg, fmt.Errorf("pgmanager: Config.Settings names %s twice (names are case-insensitive)", name)
		}
		settings[name] = v
	}
	cfg.Settings = settings
	if _, err := ParseNetworks(cfg.AllowedNetworks); err != nil {
		return cfg, fmt.Errorf("pgmanager: Config.AllowedNetworks: %w", err)
	}
	return cfg, nil
}

// slotName is the physical replication slot this instance uses on its
// primary. Slot names allow only [a-z0-9_].
func slotName(instanceID string) string { return strings.ReplaceAll(instanceID, "-", "_") }

func socketPath(dir string, port int) string {
	return filepath.Join(dir, "run", ".s.PGSQL."+strconv.Itoa(port))
}
