package router

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// Host-based rules, a subset of Postgres's pg_hba.conf: one rule a line,
//
//	TYPE       DATABASE   USER   ADDRESS   METHOD
//
// TYPE is host (with or without SSL), hostssl or hostnossl; DATABASE and
// USER are all or comma-separated names; ADDRESS is all or a CIDR
// (127.0.0.1/32, ::1/128, 10.0.0.0/8); METHOD is scram-sha-256, md5,
// trust or reject. '#' starts a comment. The first rule matching the
// connection decides; none matching refuses it. Without rules every
// connection may try its password (md5 where the role's secret is md5,
// else SCRAM-SHA-256).

type hbaMethod int

const (
	hbaMD5 hbaMethod = iota // the zero value: what the router does without rules
	hbaSCRAM
	hbaTrust
	hbaReject
)

type hbaRule struct {
	line      int
	ssl       string   // "", "ssl" or "nossl"
	databases []string // nil: all
	users     []string // nil: all
	network   *net.IPNet
	method    hbaMethod
}

var hbaMethods = map[string]hbaMethod{"md5": hbaMD5, "scram-sha-256": hbaSCRAM, "trust": hbaTrust, "reject": hbaReject}

// loadHBA reads and validates a rules file; every bad line is reported,
// by number.
func loadHBA(path string) ([]hbaRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rules, err := parseHBA(path, string(b))
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		// Postgres refuses an empty pg_hba.conf too: it would refuse
		// every connection.
		return nil, fmt.Errorf("%s: no rules", path)
	}
	return rules, nil
}

// parseHBA reads rules; each bad line is an error "name:line: why".
func parseHBA(name, text string) ([]hbaRule, error) {
	var rules []hbaRule
	var errs []error
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		r, err := parseHBALine(fields)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %v", name, i+1, err))
			continue
		}
		r.line = i + 1
		rules = append(rules, r)
	}
	return rules, errors.Join(errs...)
}

func parseHBALine(f []string) (hbaRule, error) {
	var r hbaRule
	switch f[0] {
	case "host":
	case "hostssl":
		r.ssl = "ssl"
	case "hostnossl":
		r.ssl = "nossl"
	case "local", "hostgssenc", "hostnogssenc":
		return r, fmt.Errorf("connection type %q is not supported by the router", f[0])
	default:
		return r, fmt.Errorf("invalid connection type %q", f[0])
	}
	if len(f) < 5 {
		return r, errors.New("want TYPE DATABASE USER ADDRESS METHOD")
	}
	if len(f) > 5 {
		return r, fmt.Errorf("authentication options are not supported: %q", strings.Join(f[5:], " "))
	}
	r.databases, r.users = hbaNames(f[1]), hbaNames(f[2])
	if f[3] != "all" {
		_, n, err := net.ParseCIDR(f[3])
		if err != nil {
			return r, fmt.Errorf("invalid address %q: want all or a CIDR such as 10.0.0.0/8", f[3])
		}
		r.network = n
	}
	m, ok := hbaMethods[f[4]]
	if !ok {
		return r, fmt.Errorf("invalid authentication method %q: want scram-sha-256, md5, trust or reject", f[4])
	}
	r.method = m
	return r, nil
}

// hbaNames reads "all" (nil) or comma-separated names.
func hbaNames(s string) []string {
	if s == "all" {
		return nil
	}
	return strings.Split(s, ",")
}

// matches reports whether the rule applies to a connection.
func (r *hbaRule) matches(ip net.IP, ssl bool, user, database string) bool {
	switch {
	case r.ssl == "ssl" && !ssl, r.ssl == "nossl" && ssl:
		return false
	case r.databases != nil && !slices.Contains(r.databases, database):
		return false
	case r.users != nil && !slices.Contains(r.users, user):
		return false
	case r.network != nil && (ip == nil || !r.network.Contains(ip)):
		return false
	}
	return true
}

// checkHBA finds the rule for the connection and returns its method, or
// Postgres's error when none applies or the rule rejects.
func (c *clientConn) checkHBA() (hbaMethod, error) {
	rules := c.srv.hba
	if rules == nil {
		return hbaMD5, nil
	}
	host, _, _ := net.SplitHostPort(c.nc.RemoteAddr().String())
	ip := net.ParseIP(host)
	encryption := "no encryption"
	if c.tlsDone {
		encryption = "SSL encryption"
	}
	for i := range rules {
		if !rules[i].matches(ip, c.tlsDone, c.user, c.database) {
			continue
		}
		if rules[i].method == hbaReject {
			return 0, pgerr.New("28000", "pg_hba.conf rejects connection for host %q, user %q, database %q, %s", host, c.user, c.database, encryption)
		}
		return rules[i].method, nil
	}
	return 0, pgerr.New("28000", "no pg_hba.conf entry for host %q, user %q, database %q, %s", host, c.user, c.database, encryption)
}

// CheckHBAFile reads and validates a rules file as New will, so that a
// command can refuse a bad one before it connects to anything.
func CheckHBAFile(path string) error {
	_, err := loadHBA(path)
	return err
}
