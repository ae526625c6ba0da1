package pgmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// InitPrimary creates a new cluster with initdb: UTF8, locale C (byte-order
// collation, the same on every machine, so shards sort alike), data
// checksums (which also let pg_rewind work without wal_log_hints), and a
// superuser "postgres" whose password comes from a --pwfile deleted right
// afterwards, so it is never on a command line. It then writes pgmanager's
// configuration. It does nothing if the instance is already initialized.
func (i *Instance) InitPrimary(ctx context.Context) error {
	i.opMu.Lock()
	defer i.opMu.Unlock()
	if err := i.checkOpen(); err != nil {
		return err
	}
	if i.Initialized() {
		i.log.Debug("already initialized; InitPrimary does nothing")
		return nil
	}
	if err := i.prepareDir(); err != nil {
		return err
	}
	partial, err := i.freshPartialDir()
	if err != nil {
		return err
	}
	pwfile := filepath.Join(i.cfg.Dir, ".initdb-pwfile")
	if err := i.writeFile(pwfile, []byte(i.cfg.SuperuserPassword+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	err = i.runTool(ctx, "initdb",
		"--pgdata="+partial,
		"--username=postgres",
		"--pwfile="+pwfile,
		"--encoding=UTF8",
		"--locale=C",
		"--data-checksums",
		"--auth-local=trust",
		"--auth-host=scram-sha-256",
	)
	if err != nil {
		return err
	}
	if err := i.writeDataConf(partial); err != nil {
		return err
	}
	return i.commitPartialDir(partial)
}

// freshPartialDir returns the path a new data directory is built under,
// removing what an interrupted earlier attempt left there (it is
// pgmanager's own scratch space, never a cluster anyone used).
func (i *Instance) freshPartialDir() (string, error) {
	partial := i.partialDir()
	if exists(partial) {
		i.log.Warn("removing the remains of an interrupted initialization", "path", partial)
		if err := os.RemoveAll(partial); err != nil {
			return "", fmt.Errorf("pgmanager: %w", err)
		}
	}
	return partial, nil
}

// commitPartialDir moves a complete data directory into place. Until this
// rename the instance is not Initialized, so a crash at any earlier point
// leaves nothing that a later Init would mistake for a cluster.
func (i *Instance) commitPartialDir(partial string) error {
	if err := i.user.chownTree(partial); err != nil {
		return err
	}
	if exists(i.DataDir()) {
		// A data directory without PG_VERSION: an empty or broken
		// leftover, not a cluster.
		i.log.Warn("replacing a data directory that holds no cluster", "path", i.DataDir())
		if err := os.RemoveAll(i.DataDir()); err != nil {
			return fmt.Errorf("pgmanager: %w", err)
		}
	}
	if err := os.Rename(partial, i.DataDir()); err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	if err := syncDir(i.cfg.Dir); err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	i.log.Info("initialized", "data", i.DataDir())
	return nil
}
