package pgmanager

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The configuration files pgmanager owns inside the data directory.
const (
	// confFile holds every setting pgmanager manages. postgresql.conf
	// includes it at its end, so it overrides initdb's defaults, and
	// ALTER SYSTEM (postgresql.auto.conf, read last) still overrides it.
	confFile = "tessera.conf"
	// standbyConfFile holds primary_conninfo and primary_slot_name while
	// the instance is a replica, and only a comment otherwise. It is a
	// file of its own, included by confFile, so that rewriting confFile on
	// every start (to pick up a changed Config) never has to recover which
	// primary was being followed, and promotion simply empties it. It
	// always exists: include_if_exists would log about a missing file in
	// every process at every reload.
	standbyConfFile = "tessera-standby.conf"
	includeLine     = "include '" + confFile + "'"
)

// defaultSettings are pgmanager's postgresql.conf defaults; Config.Settings
// overrides them. Why these values:
//   - wal_level=logical: MoveTables and Reshard copy with logical
//     replication; it also covers physical replicas.
//   - max_prepared_transactions = max_connections: cross-shard commits use
//     two-phase commit, and every backend may have one prepared at once
//     (a setting of max_connections alone moves it too). Replicas get the
//     same value, which hot standby requires (at least the primary's).
//   - hot_standby_feedback: queries on replicas (reads routed there) are not
//     cancelled by vacuum on the primary.
//   - wal_keep_size: a replica that was briefly away, or a rewound former
//     primary, can catch up by streaming even before its slot existed.
//   - no wal_log_hints: data checksums (initdb --data-checksums) already
//     give pg_rewind the hint-bit WAL it needs.
//   - wal_retrieve_retry_interval=250ms: a replica whose primary went
//     away (a crash restarted in place, a switchover's restart) tries to
//     reconnect this often, not every 5 s: under sync durability the
//     primary's commits wait for it.
//   - logging_collector off: stderr goes to Dir/postgres.log, which
//     pgmanager opens, so a failed start can quote it.
func defaultSettings() map[string]string {
	return map[string]string{
		"wal_level":                   "logical",
		"max_wal_senders":             "16",
		"max_replication_slots":       "16",
		"hot_standby":                 "on",
		"hot_standby_feedback":        "on",
		"max_prepared_transactions":   "200",
		"max_connections":             "200",
		"shared_buffers":              "128MB",
		"work_mem":                    "4MB",
		"maintenance_work_mem":        "64MB",
		"effective_cache_size":        "512MB",
		"wal_keep_size":               "256MB",
		"max_wal_size":                "1GB",
		"wal_retrieve_retry_interval": "250ms",
		"password_encryption":         "scram-sha-256",
		"dynamic_shared_memory_type":  "posix",
	}
}

// renderConf produces tessera.conf from the Config.
func (i *Instance) renderConf() []byte {
	s := defaultSettings()
	// cluster_name shows in every Postgres process title, which tells
	// apart the many instances on one test or development machine.
	s["cluster_name"] = i.cfg.InstanceID
	for k, v := range i.cfg.Settings {
		s[k] = v
	}
	if _, set := i.cfg.Settings["max_prepared_transactions"]; !set {
		s["max_prepared_transactions"] = s["max_connections"]
	}
	s["listen_addresses"] = i.cfg.Host
	s["port"] = strconv.Itoa(i.cfg.Port)
	s["unix_socket_directories"] = i.runDir()
	s["unix_socket_permissions"] = "0700"
	s["logging_collector"] = "off"

	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString("# Written by Tessera's pgmanager on every start: edits here are lost.\n")
	b.WriteString("# Change Config.Settings instead. ALTER SYSTEM still overrides this file.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, confQuote(s[k]))
	}
	b.WriteString("\n# Standby settings, empty unless this instance is a replica.\n")
	b.WriteString("include '" + standbyConfFile + "'\n")
	return b.Bytes()
}

// writeDataConf writes pgmanager's files into a data directory: tessera.conf,
// pg_hba.conf and the include line in postgresql.conf (added once).
func (i *Instance) writeDataConf(dataDir string) error {
	if err := i.writeFile(filepath.Join(dataDir, confFile), i.renderConf(), 0o600); err != nil {
		return err
	}
	if !exists(filepath.Join(dataDir, standbyConfFile)) {
		if err := i.writeFile(filepath.Join(dataDir, standbyConfFile), []byte(noStandbyConf), 0o600); err != nil {
			return err
		}
	}
	if err := i.writeFile(filepath.Join(dataDir, "pg_hba.conf"), renderHBA(i.networks, sslOn(i.cfg.Settings)), 0o600); err != nil {
		return err
	}
	pc := filepath.Join(dataDir, "postgresql.conf")
	old, err := os.ReadFile(pc)
	if err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	for _, line := range strings.Split(string(old), "\n") {
		if strings.TrimSpace(line) == includeLine {
			return nil
		}
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("\n# Added by Tessera's pgmanager: its settings override the ones above.\n")
	b.WriteString(includeLine + "\n")
	return i.writeFile(pc, b.Bytes(), 0o600)
}

// primaryConnInfo is the libpq connection string a replica (walreceiver,
// pg_basebackup, pg_rewind) uses to reach primary. The password comes
// from Dir/pgpass, so it appears in no configuration file.
func (i *Instance) primaryConnInfo(primary Endpoint, appName string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres passfile=%s application_name=%s",
		conninfoQuote(primary.Host), primary.Port, conninfoQuote(i.pgpassPath()), conninfoQuote(appName))
}

// writeStandbyConf makes dataDir a replica of primary: standby.signal plus
// the standby settings file.
func (i *Instance) writeStandbyConf(dataDir string, primary Endpoint) error {
	var b bytes.Buffer
	b.WriteString("# Written by Tessera's pgmanager: the primary this replica follows.\n")
	fmt.Fprintf(&b, "primary_conninfo = %s\n", confQuote(i.primaryConnInfo(primary, i.cfg.InstanceID)))
	fmt.Fprintf(&b, "primary_slot_name = %s\n", confQuote(slotName(i.cfg.InstanceID)))
	if err := i.writeFile(filepath.Join(dataDir, standbyConfFile), b.Bytes(), 0o600); err != nil {
		return err
	}
	return i.writeFile(filepath.Join(dataDir, "standby.signal"), nil, 0o600)
}

const noStandbyConf = "# Written by Tessera's pgmanager: this instance is a primary, it follows no one.\n"

// removeStandbyConf drops the standby settings after promotion (Postgres
// removes standby.signal itself when it promotes).
func (i *Instance) removeStandbyConf(dataDir string) error {
	if err := os.Remove(filepath.Join(dataDir, "standby.signal")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgmanager: %w", err)
	}
	return i.writeFile(filepath.Join(dataDir, standbyConfFile), []byte(noStandbyConf), 0o600)
}

// scrubAutoConf removes from a copied data directory's postgresql.auto.conf
// the settings pgmanager manages with ALTER SYSTEM. pg_basebackup and
// pg_rewind copy the primary's file, and a replica must not inherit the
// primary's fence or synchronous_standby_names: it would apply them the
// moment it is promoted. Postgres rewrites this file wholesale on every
// ALTER SYSTEM, so editing it while the server is down is safe.
func (i *Instance) scrubAutoConf(dataDir string) error {
	path := filepath.Join(dataDir, "postgresql.auto.conf")
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	var b bytes.Buffer
	changed := false
	for _, line := range strings.SplitAfter(string(old), "\n") {
		name, _, _ := strings.Cut(line, "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "synchronous_standby_names", "default_transaction_read_only":
			changed = true
			continue
		}
		b.WriteString(line)
	}
	if !changed {
		return nil
	}
	return i.writeFile(path, b.Bytes(), 0o600)
}

// writePgpass writes Dir/pgpass (mode 0600, which libpq insists on) with
// the superuser password for every host, for replication connections.
func (i *Instance) writePgpass() error {
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(i.cfg.SuperuserPassword)
	return i.writeFile(i.pgpassPath(), []byte("*:*:*:postgres:"+esc+"\n"), 0o600)
}

// confQuote renders a postgresql.conf value as a quoted string, which
// Postgres accepts for settings of every type.
func confQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(v) + "'"
}

// conninfoQuote renders a libpq keyword value, quoting when needed.
func conninfoQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// sqlLiteral renders a SQL string literal (standard_conforming_strings is
// on, so only quotes need doubling), for ALTER SYSTEM, which takes no
// parameters.
func sqlLiteral(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
