package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/topo/store"
)

// `tessera shard create` asks the running dev process to add a shard by
// writing a request under <cluster>/dev/shard-requests/<name> in etcd;
// the dev process creates the shard and answers under
// <cluster>/dev/shard-results/<name>. The processes that make up the
// shard belong to the dev process, so it, not the CLI, must start them.

type shardRequest struct {
	Replicas int `json:"replicas"`
}

type shardResult struct {
	Shard *ShardInfo `json:"shard,omitempty"`
	Error string     `json:"error,omitempty"`
}

func requestsPrefix(cluster string) string { return "/tessera/" + cluster + "/dev/shard-requests/" }
func resultKey(cluster, name string) string {
	return "/tessera/" + cluster + "/dev/shard-results/" + name
}

// serveShardRequests creates requested shards until ctx ends.
func (c *Cluster) serveShardRequests(ctx context.Context) {
	cli := c.store.Client()
	prefix := requestsPrefix(c.cfg.Cluster)
	handle := func(key string, value []byte) {
		name := path.Base(key)
		var req shardRequest
		res := shardResult{}
		if err := json.Unmarshal(value, &req); err != nil {
			res.Error = "bad request: " + err.Error()
		} else if info, err := c.CreateShard(ctx, name, req.Replicas); err != nil {
			res.Error = err.Error()
		} else {
			res.Shard = &info
		}
		data, _ := json.Marshal(res)
		cli.Txn(ctx).Then(clientv3.OpPut(resultKey(c.cfg.Cluster, name), string(data)), clientv3.OpDelete(key)).Commit()
	}
	// Requests written while the cluster was down are served first.
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return
	}
	for _, kv := range resp.Kvs {
		handle(string(kv.Key), kv.Value)
	}
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				handle(string(ev.Kv.Key), ev.Kv.Value)
			}
		}
	}
}

// RequestShard asks the dev cluster behind s to create a shard and waits
// for the answer.
func RequestShard(ctx context.Context, s *store.Store, name string, replicas int, timeout time.Duration) (ShardInfo, error) {
	if !shardName.MatchString(name) {
		return ShardInfo{}, fmt.Errorf("shard name %q: use lower-case letters, digits, '-' and '_'", name)
	}
	if err := CheckReplicas(replicas); err != nil {
		return ShardInfo{}, err
	}
	cli := s.Client()
	rkey := resultKey(s.Cluster(), name)
	if _, err := cli.Delete(ctx, rkey); err != nil {
		return ShardInfo{}, err
	}
	data, _ := json.Marshal(shardRequest{Replicas: replicas})
	put, err := cli.Put(ctx, requestsPrefix(s.Cluster())+name, string(data))
	if err != nil {
		return ShardInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for wr := range cli.Watch(ctx, rkey, clientv3.WithRev(put.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			var res shardResult
			if err := json.Unmarshal(ev.Kv.Value, &res); err != nil {
				return ShardInfo{}, err
			}
			if res.Error != "" {
				return ShardInfo{}, fmt.Errorf("creating shard %s: %s", name, res.Error)
			}
			return *res.Shard, nil
		}
	}
	return ShardInfo{}, fmt.Errorf("no answer from the dev cluster within %s: is `tessera dev` running for cluster %q?", timeout, s.Cluster())
}
