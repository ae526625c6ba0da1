package router

import (
	"context"
	"errors"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// reportRevision keeps the router's discovery record's TopologyRevision
// at the revision of the topology it routes by, writing it as soon as
// the watcher applies a new one: a cutover waits for every live router
// to reach the revision that moved its tables before it lets their
// statements go, so each write here shortens that wait. It runs until ctx
// ends or the registration closes.
func (s *Server) reportRevision(ctx context.Context) {
	reported := s.record.TopologyRevision
	for {
		snap, err := s.topo.WaitForRevision(ctx, reported+1)
		if err != nil {
			return
		}
		rec := s.record
		rec.TopologyRevision = snap.Revision
		for {
			err := s.reg.Update(ctx, rec)
			if err == nil {
				break
			}
			if errors.Is(err, store.ErrClosed) || ctx.Err() != nil {
				return
			}
			// etcd is unreachable for now: the cutover waits, so try
			// again soon rather than at the next topology.
			s.log.Warn("router: could not report its topology revision", "revision", snap.Revision, "err", err)
			if sleepCtx(ctx, 200*time.Millisecond) != nil {
				return
			}
		}
		s.record, reported = rec, snap.Revision
	}
}
