package pgmanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllowedNetworksInHBA checks that each allowed CIDR gets a normal and
// a replication scram-sha-256 rule, hostssl when ssl is on, and that
// without any only loopback may connect over TCP.
func TestAllowedNetworksInHBA(t *testing.T) {
	t.Parallel()
	base := baseDir(t)
	cases := []struct {
		name     string
		networks []string
		ssl      bool
		want     []string
		notWant  []string
	}{
		{"default", nil, false,
			[]string{"host    replication  all   127.0.0.1/32", "host    all          all   ::1/128"},
			[]string{"10.", "hostssl"}},
		{"networks", []string{"10.0.0.0/8", "fd00::/64"}, false,
			[]string{
				"host    all          all   10.0.0.0/8     scram-sha-256",
				"host    replication  all   10.0.0.0/8     scram-sha-256",
				"host    all          all   fd00::/64      scram-sha-256",
				"host    replication  all   fd00::/64      scram-sha-256",
			},
			[]string{"hostssl", "trust\nhost    all          all   10."}},
		{"networks with ssl", []string{"192.168.1.0/24"}, true,
			[]string{
				"hostssl all          all   192.168.1.0/24 scram-sha-256",
				"hostssl replication  all   192.168.1.0/24 scram-sha-256",
			},
			[]string{"host    all          all   192.168"}},
	}
	for _, tc := range cases {
		settings := map[string]string{}
		if tc.ssl {
			settings["ssl"] = "on"
		}
		inst, err := New(Config{InstanceID: "hba", Dir: filepath.Join(base, tc.name), Port: 5432, AllowedNetworks: tc.networks, Settings: settings})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// writeDataConf is what every start runs: check the file itself.
		data := filepath.Join(base, tc.name+"-data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "postgresql.conf"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := inst.writeDataConf(data); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := os.ReadFile(filepath.Join(data, "pg_hba.conf"))
		if err != nil {
			t.Fatal(err)
		}
		hba := string(b)
		for _, w := range tc.want {
			if !strings.Contains(hba, w) {
				t.Errorf("%s: pg_hba.conf lacks %q:\n%s", tc.name, w, hba)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(hba, w) {
				t.Errorf("%s: pg_hba.conf has %q:\n%s", tc.name, w, hba)
			}
		}
		if strings.Contains(hba, "trust") && strings.Count(hba, "trust") != 2 {
			t.Errorf("%s: only the two local lines may trust:\n%s", tc.name, hba)
		}
	}
}

// TestBadAllowedNetworks checks that New refuses bad CIDRs, naming each.
func TestBadAllowedNetworks(t *testing.T) {
	t.Parallel()
	base := baseDir(t)
	_, err := New(Config{InstanceID: "hba", Dir: filepath.Join(base, "a"), Port: 5432,
		AllowedNetworks: []string{"10.0.0.0/8", "10.0.0.0", "300.1.0.0/16", "10.1.2.3/8"}})
	if err == nil {
		t.Fatal("New accepted bad allowed networks")
	}
	for _, bad := range []string{`"10.0.0.0"`, `"300.1.0.0/16"`, `"10.1.2.3/8"`, "10.0.0.0/8?"} {
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("error does not name %s: %v", bad, err)
		}
	}
	if strings.Contains(err.Error(), `"10.0.0.0/8"`) {
		t.Errorf("error names the good network: %v", err)
	}
}
