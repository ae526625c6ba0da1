package pgmanager

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ParseNetworks parses CIDRs (10.0.0.0/8, fd00::/64) for
// Config.AllowedNetworks. It reports every bad entry at once, each by
// name, so that a command can validate its flags before starting.
func ParseNetworks(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			errs = append(errs, fmt.Errorf("allowed network %q is not a CIDR such as 10.0.0.0/8 or fd00::/64", c))
			continue
		}
		if p != p.Masked() {
			// 10.1.2.3/8 almost always means a typo; Postgres would
			// silently take the whole /8.
			errs = append(errs, fmt.Errorf("allowed network %q has host bits set (did you mean %s?)", c, p.Masked()))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// renderHBA is pg_hba.conf. Unix socket connections are trusted because
// the socket directory is private (mode 0700, owned by the OS user): only
// the sidecar (root or the same user) can reach it. TCP always needs the
// password, for clients and for replication alike: from loopback, and
// from the allowed networks, which let replicas and sidecars on other
// hosts in. When the instance has ssl on, connections from the allowed
// networks must use it (hostssl): passwords and WAL then never cross the
// network in the clear. Loopback stays host, for local tools.
func renderHBA(networks []netip.Prefix, ssl bool) []byte {
	var b bytes.Buffer
	b.WriteString(`# Written by Tessera's pgmanager on every start: edits here are lost.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   scram-sha-256
host    all          all   ::1/128        scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
host    replication  all   ::1/128        scram-sha-256
`)
	if len(networks) == 0 {
		return b.Bytes()
	}
	typ := "host"
	if ssl {
		typ = "hostssl"
	}
	b.WriteString("# Config.AllowedNetworks\n")
	for _, n := range networks {
		fmt.Fprintf(&b, "%-7s all          all   %-14s scram-sha-256\n", typ, n)
		fmt.Fprintf(&b, "%-7s replication  all   %-14s scram-sha-256\n", typ, n)
	}
	return b.Bytes()
}

// sslOn reports whether Config.Settings turn ssl on, as Postgres reads a
// boolean.
func sslOn(settings map[string]string) bool {
	switch strings.ToLower(strings.TrimSpace(settings["ssl"])) {
	case "on", "true", "yes", "1":
		return true
	}
	return false
}
