package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// joinLockTTL is how long a join lock outlives a holder that died: its
// lease then expires and the next instance may go on.
const joinLockTTL = 10 * time.Second

// LockShardJoin takes the shard's join lock, held by a new instance while
// it decides how to start (create the shard's database, or copy it from
// the registered primary) and, when it creates it, until it has
// registered as the primary. Two first instances started together would
// otherwise each find no primary and each create a database: two
// primaries of one shard, with different data. The lock lives on a lease
// that a holder that dies gives up after joinLockTTL. unlock releases it;
// it is safe to call more than once.
func (s *Store) LockShardJoin(ctx context.Context, shard string) (unlock func(), err error) {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(int(joinLockTTL/time.Second)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("opening a session for shard %s's join lock: %w", shard, err)
	}
	m := concurrency.NewMutex(sess, s.prefix+"join/"+shard)
	if err := m.Lock(ctx); err != nil {
		sess.Close()
		return nil, fmt.Errorf("taking shard %s's join lock: %w", shard, err)
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Unlock(uctx)
		sess.Close() // revokes the lease: the lock is gone even if Unlock failed
	}, nil
}

// ClaimShardCreation records, under the join lock, that instance creates
// the shard's database, and returns the instance that did, which is
// another one when the shard was created before. A creator that died
// before it registered (its lock expired) is thus not taken for an absent
// primary by the next new instance, which would create a second database.
func (s *Store) ClaimShardCreation(ctx context.Context, shard, instance string) (creator string, err error) {
	// Not under the lock's prefix, whose every key a locker waits for.
	key := s.prefix + "shard-created-by/" + shard
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, instance)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("claiming the creation of shard %s: %w", shard, err)
	}
	if resp.Succeeded {
		return instance, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return string(kvs[0].Value), nil
	}
	return "", fmt.Errorf("claiming the creation of shard %s: the claim vanished", shard)
}
