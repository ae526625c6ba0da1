package sidecar

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tesseradb/tessera/pgerr"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// The framed session port carries Session traffic without gRPC: each
// frame is a 4-byte big-endian length and one protobuf message (see
// SessionHello in sidecar.proto). A batch costs one write and one read
// on each side, without HTTP/2 framing, flow control or the goroutine
// handoffs of a gRPC stream; the router's hot loop uses it, and gRPC
// keeps health and operations.

// maxFrame bounds one frame.
const maxFrame = 64 << 20

// maxKeptFrameBuffer bounds the read buffer a connection keeps between
// frames.
const maxKeptFrameBuffer = 1 << 20

// helloTimeout bounds the handshake, so a stranger cannot hold a
// connection open without saying who it is.
const helloTimeout = 10 * time.Second

// frameConn reads and writes frames on a connection.
type frameConn struct {
	conn net.Conn
	sw   *sendThenWait // conn as r reads it; sendThenRead queues through it
	r    *bufio.Reader
	wbuf []byte
	rbuf []byte
	hdr  [4]byte // a field, not a local: io.ReadFull would move a local to the heap
}

func newFrameConn(c net.Conn) *frameConn {
	sw := newSendThenWait(c)
	return &frameConn{conn: c, sw: sw, r: bufio.NewReaderSize(sw, 64<<10)}
}

func (f *frameConn) write(m proto.Message) error {
	b, err := f.encode(m)
	if err != nil {
		return err
	}
	_, err = f.conn.Write(b)
	return err
}

// sendThenRead queues m to be written by the next read, which then waits
// for the answer without first trying the socket (sendThenWait). Only
// for a request the peer always answers, with no other reader.
func (f *frameConn) sendThenRead(m proto.Message) error {
	b, err := f.encode(m)
	if err != nil {
		return err
	}
	return f.sw.send(b)
}

// encode frames m in the connection's write buffer.
func (f *frameConn) encode(m proto.Message) ([]byte, error) {
	b := append(f.wbuf[:0], 0, 0, 0, 0)
	switch m := m.(type) {
	case *pb.SessionRequest:
		b = appendRequest(b, m)
	case *pb.SessionResponse:
		b = appendResponse(b, m)
	default:
		var err error
		if b, err = (proto.MarshalOptions{}).MarshalAppend(b, m); err != nil {
			return nil, err
		}
	}
	if len(b)-4 > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", len(b)-4, maxFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if cap(b) <= maxKeptFrameBuffer {
		f.wbuf = b
	}
	return b, nil
}

func (f *frameConn) read(m proto.Message) error {
	buf, err := f.readFrame()
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *pb.SessionRequest:
		return decodeRequest(buf, m)
	case *pb.SessionResponse:
		return decodeResponse(buf, m)
	}
	return proto.Unmarshal(buf, m)
}

// readFrame reads the next frame; the slice is valid until the next read.
func (f *frameConn) readFrame() ([]byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(f.hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	// The buffer is reused, Unmarshal copying what it keeps, unless the
	// frame is large: a connection should not hold on to megabytes.
	var buf []byte
	switch {
	case n > maxKeptFrameBuffer:
		buf = make([]byte, n)
	case cap(f.rbuf) < int(n):
		f.rbuf = make([]byte, n, max(n, 4<<10))
		buf = f.rbuf
	default:
		buf = f.rbuf[:n]
	}
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// serveFramed accepts framed session connections until the listener
// closes. Each connection gets its own goroutine for its whole life.
func (s *Server) serveFramed(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveFramedConn(c)
		}()
	}
}

func (s *Server) serveFramedConn(c net.Conn) {
	defer c.Close()
	if _, local := c.(*net.UnixConn); s.tls != nil && !local {
		c = tls.Server(c, s.tls)
	}
	f := newFrameConn(c)
	c.SetDeadline(time.Now().Add(helloTimeout))
	var hello pb.SessionHello
	if err := f.read(&hello); err != nil {
		return
	}
	if subtle.ConstantTimeCompare([]byte(hello.Secret), []byte(s.cfg.Secret)) != 1 {
		f.write(&pb.SessionHelloReply{ErrorCode: "28000", ErrorMessage: "the cluster credential is missing or wrong"})
		return
	}
	if (hello.ShardUid != "" && hello.ShardUid != s.cfg.ShardUID) || (hello.InstanceId != "" && hello.InstanceId != s.cfg.InstanceID) {
		f.write(&pb.SessionHelloReply{ErrorCode: errWrongSidecar, ErrorMessage: fmt.Sprintf("this sidecar fronts %s/%s, not %s/%s",
			s.cfg.ShardUID, s.cfg.InstanceID, hello.ShardUid, hello.InstanceId)})
		return
	}
	if err := f.write(&pb.SessionHelloReply{}); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Stop ends framed sessions as it ends gRPC streams.
		select {
		case <-s.stopping:
			c.Close()
		case <-ctx.Done():
		}
	}()
	st := &framedServerStream{f: f, ctx: ctx}
	if err := s.serveSession(st, hello.Open); err != nil {
		f.write(&pb.SessionResponse{ErrorCode: pgerr.Code(err), ErrorMessage: err.Error()})
	}
}

// framedServerStream is a framed connection seen as a sessionStream.
type framedServerStream struct {
	f   *frameConn
	ctx context.Context
	// The request Recv returns, reused: a session finishes with one batch
	// before it asks for the next, and keeps nothing of it but its
	// settings and prepared statements, which are not reused.
	req   pb.SessionRequest
	batch pb.SessionRequest_Batch
}

func (s *framedServerStream) Send(m *pb.SessionResponse) error { return s.f.write(m) }
func (s *framedServerStream) Context() context.Context         { return s.ctx }

// Recv returns the next request, valid until the next call: its batch's
// Frontend is a slice of the frame buffer.
func (s *framedServerStream) Recv() (*pb.SessionRequest, error) {
	buf, err := s.f.readFrame()
	if err != nil {
		return nil, err
	}
	s.req.Msg = nil
	return &s.req, decodeRequestInto(buf, &s.req, &s.batch, true)
}

// errWrongSidecar is the SQLSTATE of a hello that reached a sidecar
// other than the one it names (sqlserver_rejected_establishment_of_sqlconnection).
const errWrongSidecar = "08004"

// SessionSocketAddr is the address DialSession takes for a session
// port's unix socket at path.
func SessionSocketAddr(path string) string { return "unix:" + path }

// DialSession opens a session on a sidecar's framed session port: addr
// is host:port, or a unix socket (SessionSocketAddr), which goes without
// TLS since it never leaves the machine.
func DialSession(ctx context.Context, addr string, opts DialOptions, database, user, cancelToken string) (*ClientSession, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	network, address := "tcp", addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, address = "unix", path
	}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, pgerr.New("08006", "connecting to sidecar %s: %v", addr, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if opts.TLS != nil && network == "tcp" {
		cfg := opts.TLS
		if cfg.ServerName == "" {
			// As gRPC does: verify the certificate against the host dialled.
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c = tls.Client(c, cfg)
	}
	f := newFrameConn(c)
	c.SetDeadline(time.Now().Add(helloTimeout))
	var reply pb.SessionHelloReply
	err = f.write(&pb.SessionHello{Secret: opts.Secret, Open: &pb.Open{Database: database, User: user, CancelToken: cancelToken},
		ShardUid: opts.ShardUID, InstanceId: opts.InstanceID})
	if err == nil {
		err = f.read(&reply)
	}
	if err != nil {
		c.Close()
		return nil, pgerr.New("08006", "opening a session on sidecar %s: %v", addr, err)
	}
	if reply.ErrorCode != "" {
		c.Close()
		return nil, &pgerr.Error{Code: reply.ErrorCode, Message: "sidecar: " + reply.ErrorMessage}
	}
	c.SetDeadline(time.Time{})
	return &ClientSession{stream: &framedClientStream{f: f}, cancel: func() { c.Close() }}, nil
}

// DialLocalSession opens a session on the sidecar of the instance opts
// names, by the nearest way that answers: by function call when that
// sidecar runs in this process and opts.InProcess allows it, by its unix
// socket at path when that answers as the instance (the caller runs on
// the sidecar's machine), else by TCP at addr. socketFailed reports that
// the socket at path did not answer as the instance, so that the caller
// may skip it for a while.
func DialLocalSession(ctx context.Context, path, addr string, opts DialOptions, database, user, cancelToken string) (sess *ClientSession, socketFailed bool, err error) {
	if opts.InProcess {
		if sess, found, err := openInProcess(opts, database, user, cancelToken); found {
			return sess, false, err
		}
	}
	if path != "" {
		sess, err := DialSession(ctx, SessionSocketAddr(path), opts, database, user, cancelToken)
		if code := pgerr.Code(err); code != "08006" && code != errWrongSidecar {
			return sess, false, err
		}
		socketFailed = true
	}
	// TCP needs no identity check: the address is the sidecar's own.
	opts.ShardUID, opts.InstanceID = "", ""
	sess, err = DialSession(ctx, addr, opts, database, user, cancelToken)
	return sess, socketFailed, err
}

// framedClientStream is the client side of a framed session.
type framedClientStream struct {
	f    *frameConn
	resp pb.SessionResponse // recvShared's, reused
}

// recvShared is Recv without copying: the response, its Backend a slice
// of the frame buffer, is valid until the next receive.
func (s *framedClientStream) recvShared() (*pb.SessionResponse, error) {
	buf, err := s.f.readFrame()
	if err != nil {
		return nil, err
	}
	m := &s.resp
	m.Reset()
	if err := decodeResponseAlias(buf, m, true); err != nil {
		return nil, err
	}
	if m.ErrorCode != "" {
		return nil, &pgerr.Error{Code: m.ErrorCode, Message: m.ErrorMessage}
	}
	return m, nil
}

func (s *framedClientStream) Send(m *pb.SessionRequest) error { return s.f.write(m) }

// sendBatch sends a batch request whose answer the next receive reads.
func (s *framedClientStream) sendBatch(m *pb.SessionRequest) error { return s.f.sendThenRead(m) }

func (s *framedClientStream) Recv() (*pb.SessionResponse, error) {
	m := new(pb.SessionResponse)
	if err := s.f.read(m); err != nil {
		return nil, err
	}
	if m.ErrorCode != "" {
		return nil, &pgerr.Error{Code: m.ErrorCode, Message: m.ErrorMessage}
	}
	return m, nil
}

// CloseSend tells the sidecar the session is over; it answers by closing.
func (s *framedClientStream) CloseSend() error {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := s.f.conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.New("connection cannot half-close")
}
