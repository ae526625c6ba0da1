package pgmanager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// osUser is the OS user Postgres runs as.
type osUser struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
	home   string
	// cred is set when pgmanager runs as root and must switch to this user
	// for every Postgres binary; nil means "run as ourselves".
	cred *syscall.Credential
}

// resolveOSUser decides who runs Postgres. Postgres refuses to run as root
// (a compromised server must not own the machine), so root hands the work
// to an unprivileged user; anyone else can only run it as themselves.
func resolveOSUser(name string) (osUser, error) {
	if os.Geteuid() == 0 {
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		if err != nil {
			return osUser{}, fmt.Errorf("pgmanager: running as root, Postgres must run as an unprivileged OS user: %w (set Config.OSUser)", err)
		}
		ou, err := fromUser(u)
		if err != nil {
			return osUser{}, err
		}
		if ou.uid == 0 {
			return osUser{}, fmt.Errorf("pgmanager: Config.OSUser %q has uid 0; Postgres refuses to run as root", name)
		}
		ou.cred = &syscall.Credential{Uid: ou.uid, Gid: ou.gid, Groups: ou.groups}
		return ou, nil
	}
	u, err := user.Current()
	if err != nil {
		return osUser{}, fmt.Errorf("pgmanager: current user: %w", err)
	}
	if name != "" && name != u.Username {
		return osUser{}, fmt.Errorf("pgmanager: Config.OSUser %q: running Postgres as another user than the current one (%s) needs root", name, u.Username)
	}
	return fromUser(u)
}

func fromUser(u *user.User) (osUser, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return osUser{}, fmt.Errorf("pgmanager: user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return osUser{}, fmt.Errorf("pgmanager: user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	ou := osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	// Supplementary groups matter for the traversal check and replace
	// root's own groups in the child (an empty list would drop them all,
	// which is also safe, but the user's groups are what it expects).
	ids, _ := u.GroupIds()
	for _, s := range ids {
		if g, err := strconv.ParseUint(s, 10, 32); err == nil {
			ou.groups = append(ou.groups, uint32(g))
		}
	}
	if len(ou.groups) == 0 {
		ou.groups = []uint32{ou.gid}
	}
	return ou, nil
}

// chown gives path to the OS user when pgmanager runs as root; files
// pgmanager writes must be readable by Postgres (pgpass, configuration)
// and Postgres checks that it owns its data directory.
func (u osUser) chown(path string) error {
	if u.cred == nil {
		return nil
	}
	if err := os.Lchown(path, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("pgmanager: chown %s to %s: %w", path, u.name, err)
	}
	return nil
}

// chownTree gives a whole tree to the OS user (when root).
func (u osUser) chownTree(root string) error {
	if u.cred == nil {
		return nil
	}
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		return u.chown(p)
	})
}

// checkTraversable fails when an existing ancestor of dir cannot be
// searched by the OS user: Postgres, running as that user, could then not
// reach its own data directory, and the failure would surface later as a
// puzzling "permission denied" from initdb. Missing ancestors are fine:
// pgmanager creates them with mode 0755.
func (u osUser) checkTraversable(dir string) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !u.canSearch(st) {
				return fmt.Errorf("pgmanager: OS user %s cannot traverse %s (mode %v), an ancestor of the instance directory %s; make it searchable (e.g. chmod o+x %s) or choose another Config.Dir",
					u.name, p, st.Mode().Perm(), dir, p)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgmanager: checking %s: %w", p, err)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func (u osUser) canSearch(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	if u.uid == 0 {
		return true
	}
	mode := st.Mode().Perm()
	if sys.Uid == u.uid {
		return mode&0o100 != 0
	}
	for _, g := range u.groups {
		if sys.Gid == g {
			return mode&0o010 != 0
		}
	}
	if sys.Gid == u.gid {
		return mode&0o010 != 0
	}
	return mode&0o001 != 0
}
