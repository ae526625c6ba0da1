package pgmanager

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// minMajor is the oldest Postgres pgmanager supports: 13 is the first
// release that reloads primary_conninfo without a restart (FollowPrimary)
// and whose pg_rewind runs crash recovery on an uncleanly stopped target
// itself (Rewind after a crash).
const minMajor = 13

// requiredTools are the binaries pgmanager runs; a candidate directory must
// hold all of them.
var requiredTools = []string{"postgres", "initdb", "pg_basebackup", "pg_rewind"}

// binaries is a discovered Postgres installation.
type binaries struct {
	dir     string
	version string // e.g. "15.18"
	major   int
}

func (b binaries) path(tool string) string { return filepath.Join(b.dir, tool) }

// findBinaries locates the server binaries. The order, most explicit
// first: Config.BinDir; `pg_config --bindir` if that directory has
// postgres (Debian's /usr/bin/pg_config answers for the client packages
// and may name a directory without the server); the directory of
// `postgres` on PATH; the newest /usr/lib/postgresql/<major>/bin (Debian's
// layout, where none of the above finds the server).
func findBinaries(explicit string) (binaries, error) {
	if explicit != "" {
		dir, err := filepath.Abs(explicit)
		if err != nil {
			return binaries{}, fmt.Errorf("pgmanager: Config.BinDir: %w", err)
		}
		if err := checkTools(dir); err != nil {
			return binaries{}, fmt.Errorf("pgmanager: Config.BinDir: %w", err)
		}
		return describe(dir)
	}
	var tried []string
	try := func(dir string) (binaries, bool) {
		if dir == "" {
			return binaries{}, false
		}
		tried = append(tried, dir)
		if checkTools(dir) != nil {
			return binaries{}, false
		}
		b, err := describe(dir)
		return b, err == nil
	}
	if b, ok := try(pgConfigBinDir()); ok {
		return b, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if b, ok := try(filepath.Dir(p)); ok {
			return b, nil
		}
	}
	for _, dir := range debianBinDirs() {
		if b, ok := try(dir); ok {
			return b, nil
		}
	}
	if len(tried) == 0 {
		return binaries{}, fmt.Errorf("pgmanager: no Postgres server binaries found (no pg_config, no postgres on PATH, no /usr/lib/postgresql/*/bin); set Config.BinDir")
	}
	return binaries{}, fmt.Errorf("pgmanager: no usable Postgres %d+ server binaries (need %s) in %s; set Config.BinDir",
		minMajor, strings.Join(requiredTools, ", "), strings.Join(tried, ", "))
}

func pgConfigBinDir() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// debianBinDirs returns /usr/lib/postgresql/*/bin, newest major first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(a, b int) bool { return major(dirs[a]) > major(dirs[b]) })
	return dirs
}

func checkTools(dir string) error {
	for _, t := range requiredTools {
		st, err := os.Stat(filepath.Join(dir, t))
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", filepath.Join(dir, t))
		}
	}
	return nil
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(\.\d+)?`)

// describe asks postgres for its version. `postgres --version` works as
// root: the root check comes after option parsing.
func describe(dir string) (binaries, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("pgmanager: %s --version: %w", filepath.Join(dir, "postgres"), err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return binaries{}, fmt.Errorf("pgmanager: cannot parse %q from %s --version", strings.TrimSpace(string(out)), filepath.Join(dir, "postgres"))
	}
	major, _ := strconv.Atoi(m[1])
	b := binaries{dir: dir, version: m[1] + m[2], major: major}
	if major < minMajor {
		return b, fmt.Errorf("pgmanager: %s is Postgres %s; pgmanager needs %d or newer", dir, b.version, minMajor)
	}
	return b, nil
}
