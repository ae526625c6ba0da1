package cli

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/topo/store"
)

// instanceFlags are `tessera instance`'s flags, each also read from a
// TESSERA_* environment variable. Secrets have only *-file flags: a value
// on the command line would show in ps and in shell history.
type instanceFlags struct {
	etcd, cluster              string
	etcdTLS                    tlsfiles.Client
	etcdUser, etcdPasswordFile string
	secretFile                 string
	postgresPasswordFile       string

	shard, id, zone string
	dir, binDir     string

	postgresListen, postgresAdvertise string
	sidecarListen, sidecarAdvertise   string
	sessionListen, sessionAdvertise   string
	allowedNetworks                   []string

	sidecarTLSCert, sidecarTLSKey, sidecarTLSClientCA string
	isolationFence                                    string
	logLevel                                          string
}

func (f *instanceFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.etcd, "etcd", os.Getenv("TESSERA_ETCD"), "comma-separated etcd endpoints of the topology service (required; env TESSERA_ETCD)")
	fl.StringVar(&f.cluster, "cluster", envOr("TESSERA_CLUSTER", "default"), "cluster name in the topology service (env TESSERA_CLUSTER)")
	tlsClientFlags(fl, "etcd", "etcd", &f.etcdTLS)
	fl.StringVar(&f.etcdUser, "etcd-user", os.Getenv("TESSERA_ETCD_USER"), "etcd user, with --etcd-password-file (env TESSERA_ETCD_USER)")
	fl.StringVar(&f.etcdPasswordFile, "etcd-password-file", os.Getenv("TESSERA_ETCD_PASSWORD_FILE"), "file holding the etcd user's password (env TESSERA_ETCD_PASSWORD_FILE)")
	fl.StringVar(&f.secretFile, "secret-file", os.Getenv("TESSERA_SECRET_FILE"),
		"file holding the cluster credential every caller of the sidecar presents, at least 16 characters (required; env TESSERA_SECRET_FILE)")
	fl.StringVar(&f.postgresPasswordFile, "postgres-password-file", os.Getenv("TESSERA_POSTGRES_PASSWORD_FILE"),
		"file holding the password of superuser postgres, also used for replication: the same on every instance of the cluster (required; env TESSERA_POSTGRES_PASSWORD_FILE)")

	fl.StringVar(&f.shard, "shard", os.Getenv("TESSERA_SHARD"), "shard this instance belongs to (required; env TESSERA_SHARD)")
	fl.StringVar(&f.id, "id", os.Getenv("TESSERA_INSTANCE_ID"), "instance name, unique in the cluster: lower-case letters, digits, '_' and '-' (required; env TESSERA_INSTANCE_ID)")
	fl.StringVar(&f.zone, "zone", os.Getenv("TESSERA_ZONE"), "availability zone the host is in, for cross_zone_sync durability (required; env TESSERA_ZONE)")
	fl.StringVar(&f.dir, "dir", os.Getenv("TESSERA_INSTANCE_DIR"), "instance directory: Postgres's data and pgmanager's files; running again resumes it (required; env TESSERA_INSTANCE_DIR)")
	fl.StringVar(&f.binDir, "pg-bindir", os.Getenv("TESSERA_PG_BINDIR"), "directory of the Postgres server binaries (default: discovered; env TESSERA_PG_BINDIR)")

	fl.StringVar(&f.postgresListen, "postgres-listen", envOr("TESSERA_POSTGRES_LISTEN", "127.0.0.1:5432"),
		"host:port Postgres listens on; host * or 0.0.0.0 for every interface (env TESSERA_POSTGRES_LISTEN)")
	fl.StringVar(&f.postgresAdvertise, "postgres-advertise", os.Getenv("TESSERA_POSTGRES_ADVERTISE"),
		"host:port other hosts reach Postgres at, published in the topology service; replicas base-backup and stream from it (default: --postgres-listen, which then must name a host; env TESSERA_POSTGRES_ADVERTISE)")
	fl.StringVar(&f.sidecarListen, "sidecar-listen", envOr("TESSERA_SIDECAR_LISTEN", "127.0.0.1:6500"),
		"host:port of the sidecar's gRPC port (env TESSERA_SIDECAR_LISTEN)")
	fl.StringVar(&f.sidecarAdvertise, "sidecar-advertise", os.Getenv("TESSERA_SIDECAR_ADVERTISE"),
		"host:port routers and workers reach the sidecar's gRPC port at (default: --sidecar-listen; env TESSERA_SIDECAR_ADVERTISE)")
	fl.StringVar(&f.sessionListen, "session-listen", envOr("TESSERA_SESSION_LISTEN", "127.0.0.1:6501"),
		"host:port of the sidecar's framed session port, the routers' fast path for queries (empty: none; env TESSERA_SESSION_LISTEN)")
	fl.StringVar(&f.sessionAdvertise, "session-advertise", os.Getenv("TESSERA_SESSION_ADVERTISE"),
		"host:port routers reach the session port at (default: --session-listen; env TESSERA_SESSION_ADVERTISE)")
	fl.StringSliceVar(&f.allowedNetworks, "allowed-networks", splitList(os.Getenv("TESSERA_ALLOWED_NETWORKS")),
		"CIDRs besides loopback whose hosts may connect to Postgres and replicate from it with the password, such as the other instances' hosts (default: loopback only; env TESSERA_ALLOWED_NETWORKS, comma-separated)")

	fl.StringVar(&f.sidecarTLSCert, "sidecar-tls-cert", os.Getenv("TESSERA_SIDECAR_TLS_CERT"),
		"certificate file of the sidecar's ports: TLS on both, plaintext clients refused (with --sidecar-tls-key; env TESSERA_SIDECAR_TLS_CERT)")
	fl.StringVar(&f.sidecarTLSKey, "sidecar-tls-key", os.Getenv("TESSERA_SIDECAR_TLS_KEY"), "key file of --sidecar-tls-cert (env TESSERA_SIDECAR_TLS_KEY)")
	fl.StringVar(&f.sidecarTLSClientCA, "sidecar-tls-client-ca", os.Getenv("TESSERA_SIDECAR_TLS_CLIENT_CA"),
		"CA file: clients must present a certificate it signed (routers' --sidecar-cert; env TESSERA_SIDECAR_TLS_CLIENT_CA)")
	fl.StringVar(&f.isolationFence, "isolation-fence", envOr("TESSERA_ISOLATION_FENCE", "1s"),
		"longest `duration` the sidecar serves without reaching a quorum of etcd: past it, a cut-off instance refuses every client statement (57P03) until etcd answers again, so that a cut-off primary takes no writes once its shard may fail over. "+
			"It must be shorter than the worker admin's detect window (1.5 s by default); at least "+sidecar.MinIsolationFence.String()+"; 0 turns it off (env TESSERA_ISOLATION_FENCE)")
	fl.StringVar(&f.logLevel, "log-level", envOr("TESSERA_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env TESSERA_LOG_LEVEL)")
}

// instanceSpec is what the flags say, checked and with the secrets read.
type instanceSpec struct {
	endpoints []string
	cluster   string
	etcd      store.DialOptions
	// pg and sc lack only what exists once the process runs: the logger,
	// the store and the manager.
	pg pgmanager.Config
	sc sidecar.Config
}

var (
	instanceIDFlagRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
	shardFlagRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,40}$`)
)

// check validates every flag and reads the secret files, and reports all
// the problems at once, so that one start tells an operator everything to
// fix.
func (f *instanceFlags) check() (*instanceSpec, error) {
	var p problems
	spec := &instanceSpec{cluster: f.cluster}

	spec.endpoints = splitList(f.etcd)
	if len(spec.endpoints) == 0 {
		p.add("--etcd (TESSERA_ETCD) is required: the etcd endpoints of the topology service")
	}
	if f.cluster == "" {
		p.add("--cluster (TESSERA_CLUSTER) is empty")
	}
	cf := clusterFlags{etcdTLS: f.etcdTLS, etcdUser: f.etcdUser, etcdPasswordFile: f.etcdPasswordFile}
	var err error
	if spec.etcd, err = cf.etcdOptions(); err != nil {
		p.add("%v", err)
	}
	secret := p.readSecret("--secret-file", "TESSERA_SECRET_FILE", f.secretFile)
	if secret != "" && len(secret) < 16 {
		p.add("the cluster credential in %s has %d characters: at least 16", f.secretFile, len(secret))
	}
	password := p.readSecret("--postgres-password-file", "TESSERA_POSTGRES_PASSWORD_FILE", f.postgresPasswordFile)
	if strings.ContainsAny(password, "\x00\n\r") {
		p.add("the Postgres password in %s spans more than one line", f.postgresPasswordFile)
	}

	switch {
	case f.shard == "":
		p.add("--shard (TESSERA_SHARD) is required")
	case !shardFlagRE.MatchString(f.shard):
		p.add("--shard %q: use lower-case letters, digits, '-' and '_', at most 41", f.shard)
	}
	switch {
	case f.id == "":
		p.add("--id (TESSERA_INSTANCE_ID) is required")
	case !instanceIDFlagRE.MatchString(f.id):
		p.add("--id %q: use 1 to 63 lower-case letters, digits, '-' and '_'", f.id)
	}
	if f.zone == "" {
		p.add("--zone (TESSERA_ZONE) is required")
	}
	if f.dir == "" {
		p.add("--dir (TESSERA_INSTANCE_DIR) is required")
	}
	for _, n := range f.allowedNetworks {
		if _, err := pgmanager.ParseNetworks([]string{n}); err != nil {
			p.add("--allowed-networks: %v", err)
		}
	}

	pgHost, pgPort, ok := p.listen("--postgres-listen", f.postgresListen, false)
	var pgAdvertise string
	if ok {
		pgAdvertise = p.advertise("--postgres-advertise", f.postgresAdvertise, "--postgres-listen", pgHost, pgPort)
	}
	if host, port, ok := p.listen("--sidecar-listen", f.sidecarListen, true); ok {
		p.advertise("--sidecar-advertise", f.sidecarAdvertise, "--sidecar-listen", host, port)
	}
	if f.sessionListen != "" {
		if host, port, ok := p.listen("--session-listen", f.sessionListen, true); ok {
			p.advertise("--session-advertise", f.sessionAdvertise, "--session-listen", host, port)
		}
	} else if f.sessionAdvertise != "" {
		p.add("--session-advertise needs --session-listen")
	}

	switch {
	case (f.sidecarTLSCert == "") != (f.sidecarTLSKey == ""):
		p.add("sidecar TLS needs both --sidecar-tls-cert and --sidecar-tls-key")
	case f.sidecarTLSClientCA != "" && f.sidecarTLSCert == "":
		p.add("--sidecar-tls-client-ca needs --sidecar-tls-cert and --sidecar-tls-key")
	}
	for _, file := range []struct{ flag, path string }{
		{"--sidecar-tls-cert", f.sidecarTLSCert}, {"--sidecar-tls-key", f.sidecarTLSKey}, {"--sidecar-tls-client-ca", f.sidecarTLSClientCA},
	} {
		if file.path == "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			p.add("%s: %v", file.flag, err)
		}
	}
	isolationFence, err := time.ParseDuration(f.isolationFence)
	switch {
	case err != nil:
		p.add("--isolation-fence %q: want a duration such as 1s or 800ms (0 turns it off)", f.isolationFence)
	case isolationFence < 0 || isolationFence > 0 && isolationFence < sidecar.MinIsolationFence:
		p.add("--isolation-fence %s: want 0 (off) or at least %s", isolationFence, sidecar.MinIsolationFence)
	}
	if _, err := newLogger(nil, f.logLevel); err != nil {
		p.add("%v", err)
	}
	if err := p.err(); err != nil {
		return nil, err
	}

	spec.pg = pgmanager.Config{
		InstanceID:        f.id,
		Dir:               f.dir,
		Host:              pgHost,
		Port:              pgPort,
		BinDir:            f.binDir,
		SuperuserPassword: password,
		AllowedNetworks:   f.allowedNetworks,
		// A crashed postgres comes back by itself, as under dev; the
		// sidecar reports it down meanwhile.
		RestartOnCrash: true,
	}
	spec.sc = sidecar.Config{
		ShardUID:             f.shard,
		InstanceID:           f.id,
		Zone:                 f.zone,
		ListenAddr:           f.sidecarListen,
		AdvertiseAddr:        f.sidecarAdvertise,
		SessionListenAddr:    f.sessionListen,
		SessionAdvertiseAddr: f.sessionAdvertise,
		PostgresAddr:         pgAdvertise,
		Secret:               secret,
		TLSCertFile:          f.sidecarTLSCert,
		TLSKeyFile:           f.sidecarTLSKey,
		TLSClientCAFile:      f.sidecarTLSClientCA,
		IsolationFence:       isolationFence,
	}
	return spec, nil
}

// problems collects what is wrong with the flags.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%d problem(s) with the flags:\n  - %s", len(p), strings.Join(p, "\n  - "))
}

// readSecret reads a secret from the file a flag names, trimmed of its
// final line break.
func (p *problems) readSecret(flag, env, path string) string {
	if path == "" {
		p.add("%s (%s) is required", flag, env)
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		p.add("%s: %v", flag, err)
		return ""
	}
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		p.add("%s: %s is empty", flag, path)
	}
	return s
}

// listen checks a host:port to listen on. Port 0 (any free port) is
// allowed where the process can publish the port it got.
func (p *problems) listen(flag, addr string, portZeroOK bool) (host string, port int, ok bool) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("%s: %v (want host:port)", flag, err)
		return "", 0, false
	}
	port, err = strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 || port == 0 && !portZeroOK {
		p.add("%s %q: port %q is not a port number 1..65535", flag, addr, portStr)
		return "", 0, false
	}
	return host, port, true
}

// advertise checks the address published for a listener and returns it:
// the flag's value, else the listen address, which must then be one other
// hosts can dial.
func (p *problems) advertise(flag, addr, listenFlag, listenHost string, listenPort int) string {
	if addr == "" {
		if wildcard(listenHost) {
			p.add("%s is required: %s listens on every interface, so it does not say which address other hosts dial", flag, listenFlag)
			return ""
		}
		return net.JoinHostPort(listenHost, strconv.Itoa(listenPort))
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("%s: %v (want host:port)", flag, err)
		return ""
	}
	if port, err := strconv.Atoi(portStr); err != nil || port < 1 || port > 65535 {
		p.add("%s %q: port %q is not a port number 1..65535", flag, addr, portStr)
	}
	if wildcard(host) {
		p.add("%s %q: advertise a host other hosts can dial, not a wildcard", flag, addr)
	}
	if listenPort == 0 {
		p.add("%s %q: %s picks a free port at start, which no advertised address can know; give it a port", flag, addr, listenFlag)
	}
	return addr
}

// wildcard reports whether a listen host means every interface.
func wildcard(host string) bool {
	if host == "" || host == "*" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
