package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Client is a connection to one sidecar, for routers and workflows.
type Client struct {
	pb.SidecarClient
	conn *grpc.ClientConn
}

// DialOptions say how to reach a sidecar.
type DialOptions struct {
	// Secret is the cluster credential.
	Secret string
	// TLS, when set, is used for the connection; otherwise it is
	// plaintext (loopback and private networks only).
	TLS *tls.Config
	// ShardUID and InstanceID, when set, name the instance DialSession
	// means to reach: another sidecar refuses the session with 08004.
	ShardUID, InstanceID string
	// InProcess lets DialLocalSession call that sidecar directly when it
	// runs in this process (inprocess.go).
	InProcess bool
}

// Dial connects to the sidecar at addr. The connection is made lazily;
// the first call reports an unreachable sidecar.
func Dial(addr string, opts DialOptions) (*Client, error) {
	transport := insecure.NewCredentials()
	if opts.TLS != nil {
		transport = credentials.NewTLS(opts.TLS)
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(transport),
		grpc.WithPerRPCCredentials(secretCredentials{secret: opts.Secret, requireTLS: opts.TLS != nil}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
	)
	if err != nil {
		return nil, err
	}
	return &Client{SidecarClient: pb.NewSidecarClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ClientSession is one open session, on the Session RPC, on the framed
// session port (DialSession) or in-process (DialLocalSession).
type ClientSession struct {
	stream clientStream
	local  *localStream // set instead of stream in-process
	cancel func()
	// frames, once Listen ran, carries every response that is not async,
	// read from the stream by Listen's goroutine.
	frames chan frame

	// What earlier batches of this session sent, so that later ones refer
	// to it instead of sending it again (see Batch.same_settings and
	// Batch.prepared_names); only Run touches these.
	sentSettings []setting
	sentOnce     bool
	sentNames    map[string]struct{}
	req          pb.SessionRequest
	reqBatch     pb.SessionRequest_Batch
	wireBatch    pb.Batch
}

// maxSessionStatements bounds the prepared statements one session
// remembers by name, on both ends; a client that reaches it starts over
// with prepared_reset.
const maxSessionStatements = 1024

type frame struct {
	resp *pb.SessionResponse
	err  error
}

// clientStream is what a ClientSession needs of its transport.
type clientStream interface {
	Send(*pb.SessionRequest) error
	Recv() (*pb.SessionResponse, error)
	CloseSend() error
}

// OpenSession opens a session as user on database. End it with Close,
// which returns any pinned backend to the pool clean.
func (c *Client) OpenSession(ctx context.Context, database, user string) (*ClientSession, error) {
	return c.OpenCancelableSession(ctx, database, user, "")
}

// OpenCancelableSession opens a session that Cancel with cancelToken can
// interrupt.
func (c *Client) OpenCancelableSession(ctx context.Context, database, user, cancelToken string) (*ClientSession, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.Session(ctx)
	if err != nil {
		cancel()
		return nil, ErrorFromStatus(err)
	}
	if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Open{Open: &pb.Open{Database: database, User: user, CancelToken: cancelToken}}}); err != nil {
		cancel()
		return nil, ErrorFromStatus(err)
	}
	return &ClientSession{stream: stream, cancel: cancel}, nil
}

// Result is how a batch ended.
type Result struct {
	TxStatus pb.TxStatus
	CopyIn   bool
}

// Run sends a batch and passes each chunk of the answer to fn, which must
// not keep the slice.
func (s *ClientSession) Run(batch *pb.Batch, fn func(chunk []byte) error) (Result, error) {
	return s.RunLast(batch, func(chunk []byte, _ bool) error { return fn(chunk) })
}

// RunLast is Run telling fn which chunk is the answer's last: the one
// with the final ReadyForQuery (or none, when COPY waits for data),
// passed even when empty. fn must not keep a chunk past its call, except
// the last, which stays valid until the session's next call.
func (s *ClientSession) RunLast(batch *pb.Batch, fn func(chunk []byte, last bool) error) (Result, error) {
	if s.local != nil {
		return s.local.run(batch, fn)
	}
	if err := s.send(batch); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream; its status says why.
			_, err = s.stream.Recv()
		}
		return Result{}, ErrorFromStatus(err)
	}
	for {
		resp, err := s.recv()
		if err != nil {
			return Result{}, ErrorFromStatus(err)
		}
		if len(resp.Backend) > 0 || resp.Done {
			if err := fn(resp.Backend, resp.Done); err != nil {
				return Result{}, err
			}
		}
		if resp.Done {
			return Result{TxStatus: resp.TxStatus, CopyIn: resp.CopyIn}, nil
		}
	}
}

// send sends batch. On the framed port, when no Listen goroutine reads
// too, the request goes out as the first step of receiving its answer.
func (s *ClientSession) send(batch *pb.Batch) error {
	if f, ok := s.stream.(*framedClientStream); ok && s.frames == nil {
		return f.sendBatch(s.wire(batch))
	}
	return s.stream.Send(s.wire(batch))
}

// wire is the request that carries batch on this session: settings and
// prepared statements that earlier batches sent go by reference. The
// request is reused by the next call.
func (s *ClientSession) wire(batch *pb.Batch) *pb.SessionRequest {
	w := &s.wireBatch
	names, prepared := w.PreparedNames[:0], w.Prepared[:0]
	clear(w.Prepared)
	w.Reset()
	w.Mode, w.Frontend, w.PreparedNames, w.Prepared, w.Autocommit = batch.Mode, batch.Frontend, names, prepared, batch.Autocommit
	if s.sentOnce && sameSettingList(s.sentSettings, batch.Settings) {
		w.SameSettings = true
	} else {
		w.Settings = batch.Settings
		s.sentSettings = s.sentSettings[:0]
		for _, x := range batch.Settings {
			s.sentSettings = append(s.sentSettings, setting{x.Name, x.Value})
		}
		s.sentOnce = true
	}
	for _, ps := range batch.Prepared {
		if _, ok := s.sentNames[ps.Name]; ok {
			w.PreparedNames = append(w.PreparedNames, ps.Name)
			continue
		}
		if s.sentNames == nil || len(s.sentNames) >= maxSessionStatements {
			// Start over rather than grow without bound: the sidecar
			// forgets too, and the statements this batch needs follow in
			// full.
			s.sentNames = make(map[string]struct{})
			w.PreparedReset = true
			w.Prepared, w.PreparedNames = append(w.Prepared[:0], batch.Prepared...), nil
			for _, p := range batch.Prepared {
				s.sentNames[p.Name] = struct{}{}
			}
			break
		}
		s.sentNames[ps.Name] = struct{}{}
		w.Prepared = append(w.Prepared, ps)
	}
	s.reqBatch.Batch = w
	s.req.Msg = &s.reqBatch
	return &s.req
}

func sameSettingList(sent []setting, list []*pb.Setting) bool {
	if len(sent) != len(list) {
		return false
	}
	for i, x := range list {
		if sent[i].name != x.Name || sent[i].value != x.Value {
			return false
		}
	}
	return true
}

// Listen passes the asynchronous messages (notifications, notices) that
// the sidecar sends while the session is idle to fn, as they come, from a
// goroutine of its own, until the session ends. Run goes on receiving
// its answers in order. A router calls it once a client's session is
// pinned to its backend, which is when Postgres may speak unasked.
func (s *ClientSession) Listen(fn func(msgs []byte)) {
	if s.local != nil {
		s.local.setListener(fn)
		return
	}
	if s.frames != nil {
		return
	}
	s.frames = make(chan frame, 4)
	go func() {
		defer close(s.frames)
		for {
			resp, err := s.stream.Recv()
			if err == nil && resp.Async {
				fn(resp.Backend)
				continue
			}
			s.frames <- frame{resp, err}
			if err != nil {
				return
			}
		}
	}()
}

// recv returns the next response that answers a batch.
func (s *ClientSession) recv() (*pb.SessionResponse, error) {
	if s.frames == nil {
		for {
			resp, err := s.recvShared()
			if err != nil || !resp.Async {
				return resp, err
			}
			// Without Listen, a notification sent while idle goes out with
			// the next answer, as it would before.
			if len(resp.Backend) > 0 {
				return &pb.SessionResponse{Backend: resp.Backend}, nil
			}
		}
	}
	f, ok := <-s.frames
	if !ok {
		return nil, io.EOF
	}
	return f.resp, f.err
}

// recvShared receives the next response without copying it where the
// transport can (the framed port): Run is done with a response before it
// receives the next. Listen's goroutine, which reads ahead, owns what it
// receives instead.
func (s *ClientSession) recvShared() (*pb.SessionResponse, error) {
	if f, ok := s.stream.(*framedClientStream); ok {
		return f.recvShared()
	}
	return s.stream.Recv()
}

// Abandon ends the session at once, from any goroutine, without a word
// to the sidecar: its connection (or stream) is closed, so a batch
// waiting for its answer ends with an error, as does every later one.
// For a sidecar that can no longer be reached or waited for, such as a
// primary deposed while the network cut it off; Close afterwards
// returns without waiting. An in-process session has no network to be
// cut off by, and is left alone.
func (s *ClientSession) Abandon() {
	if s.local == nil {
		s.cancel()
	}
}

// Close ends the session and waits for the sidecar to finish with it.
func (s *ClientSession) Close() error {
	if s.local != nil {
		s.local.close()
		return nil
	}
	defer s.cancel()
	if err := s.stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := s.recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return ErrorFromStatus(err)
		}
	}
}
