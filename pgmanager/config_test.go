package pgmanager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	base := baseDir(t)
	ok := Config{InstanceID: "a-1", Dir: filepath.Join(base, "a"), Port: 5432}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.InstanceID = "" }, "InstanceID is required"},
		{"upper-case id", func(c *Config) { c.InstanceID = "Shard1" }, "InstanceID"},
		{"long id", func(c *Config) { c.InstanceID = strings.Repeat("a", 64) }, "InstanceID"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is required"},
		{"no port", func(c *Config) { c.Port = 0 }, "Port is required"},
		{"bad port", func(c *Config) { c.Port = 70000 }, "out of range"},
		{"long socket path", func(c *Config) { c.Dir = filepath.Join(base, strings.Repeat("d", 90)) }, "unix socket path"},
		{"reserved setting", func(c *Config) { c.Settings = map[string]string{"Port": "1"} }, "may not set port"},
		{"fence setting", func(c *Config) { c.Settings = map[string]string{"default_transaction_read_only": "on"} }, "Fence"},
		{"bad setting name", func(c *Config) { c.Settings = map[string]string{"work mem": "1MB"} }, "not a setting name"},
		{"newline in value", func(c *Config) { c.Settings = map[string]string{"work_mem": "1MB\nport = 1"} }, "line break"},
		{"newline in password", func(c *Config) { c.SuperuserPassword = "a\nb" }, "line break"},
		{"bad bindir", func(c *Config) { c.BinDir = base }, "BinDir"},
	}
	for _, tc := range cases {
		cfg := ok
		tc.mod(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	inst, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	got := inst.Config()
	if got.Host != "127.0.0.1" || got.SuperuserPassword != "postgres" || got.BinDir == "" || got.OSUser == "" {
		t.Errorf("defaults not filled in: %+v", got)
	}
	if want := "host=" + filepath.Join(base, "a", "run") + " port=5432 dbname=app user=u sslmode=disable"; inst.ConnConfig("app", "u") != want {
		t.Errorf("ConnConfig = %q, want %q", inst.ConnConfig("app", "u"), want)
	}
	if inst.Initialized() {
		t.Error("Initialized before InitPrimary")
	}
	if err := inst.Promote(testCtx(t)); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Promote on a stopped instance: %v, want ErrNotRunning", err)
	}
	if err := inst.Start(testCtx(t)); err == nil || !strings.Contains(err.Error(), "not initialized") {
		t.Errorf("Start before init: %v", err)
	}
	if _, err := os.Stat(ok.Dir); err == nil {
		t.Error("New created the instance directory")
	}
}

func TestTraversalCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the check matters only when Postgres runs as another user")
	}
	t.Parallel()
	dir, err := os.MkdirTemp("", "pgm") // 0700: the postgres user cannot enter
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_, err = New(Config{InstanceID: "x", Dir: filepath.Join(dir, "x"), Port: 5432})
	if err == nil || !strings.Contains(err.Error(), "cannot traverse "+dir) {
		t.Fatalf("New under a 0700 root-owned directory: %v", err)
	}
}

func TestLSN(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"0/0", "0/16B3748", "1A/FF000028", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != s {
			t.Errorf("ParseLSN(%q).String() = %q", s, l.String())
		}
	}
	if l, _ := ParseLSN("1/2"); l != 1<<32|2 {
		t.Errorf("ParseLSN(1/2) = %d", l)
	}
	for _, s := range []string{"", "12", "x/1", "1/100000000"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("ParseLSN(%q) succeeded", s)
		}
	}
}

func TestQuoting(t *testing.T) {
	t.Parallel()
	if got := confQuote(`a'b\c`); got != `'a''b\\c'` {
		t.Errorf("confQuote = %s", got)
	}
	if got := conninfoQuote(`/a b/it's`); got != `'/a b/it\'s'` {
		t.Errorf("conninfoQuote = %s", got)
	}
	if got := conninfoQuote("plain"); got != "plain" {
		t.Errorf("conninfoQuote = %s", got)
	}
	if got := sqlLiteral(`FIRST 1 ("it's")`); got != `'FIRST 1 ("it''s")'` {
		t.Errorf("sqlLiteral = %s", got)
	}
}
