package dev

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Info is cluster.json: where everything of a dev cluster listens. It is
// also the cluster's persistent state: ports and instances are reused when
// the cluster runs again.
type Info struct {
	Router     string      `json:"router"`
	Etcd       []string    `json:"etcd"`
	Temporal   string      `json:"temporal"`
	TemporalUI string      `json:"temporal_ui"`
	Cluster    string      `json:"cluster"`
	DataDir    string      `json:"data_dir"`
	SecretFile string      `json:"secret_file"`
	Shards     []ShardInfo `json:"shards"`
}

// ShardInfo lists a shard's instances.
type ShardInfo struct {
	UID       string         `json:"uid"`
	Instances []InstanceInfo `json:"instances"`
}

// InstanceInfo is one Postgres instance and its sidecar. Role is the role
// it had when cluster.json was last written; `tessera status` tells the
// current one.
type InstanceInfo struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Sidecar string `json:"sidecar"`
}

const infoFile = "cluster.json"

// ReadInfo reads DIR/cluster.json.
func ReadInfo(dir string) (*Info, error) {
	data, err := os.ReadFile(filepath.Join(dir, infoFile))
	if err != nil {
		return nil, err
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, infoFile), err)
	}
	return &info, nil
}

func writeInfo(dir string, info *Info) error {
	sort.Slice(info.Shards, func(i, j int) bool { return shardLess(info.Shards[i].UID, info.Shards[j].UID) })
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, infoFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, infoFile))
}

// shardLess orders names naturally: shard-2 before shard-10.
func shardLess(a, b string) bool {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if pa != pb || na == nb {
		if pa != pb {
			return pa < pb
		}
		return a < b
	}
	return na < nb
}

// splitNumber splits a trailing decimal number off a name.
func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil || len(s)-i > 9 {
		return s, -1
	}
	return s[:i], n
}

// ReadSecret returns the cluster credential kept in DIR/secret.
func ReadSecret(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "secret"))
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// ensureSecret returns the cluster credential, creating it on first run.
// It never appears in logs or in cluster.json, only in this 0600 file.
func ensureSecret(dir string) (string, error) {
	secret, err := ReadSecret(dir)
	if err == nil {
		return secret, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	secret = hex.EncodeToString(b[:])
	return secret, os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o600)
}
