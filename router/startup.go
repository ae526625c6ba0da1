package router

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"io"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// Startup packet codes (protocol.sgml).
const (
	protocol30    = 3 << 16
	sslRequest    = 80877103
	gssencRequest = 80877104
	cancelRequest = 80877102
	// maxStartup is Postgres's MAX_STARTUP_PACKET_LENGTH.
	maxStartup = 10000
	// maxAuthMessage bounds a message before authentication succeeds, as
	// Postgres's PG_MAX_AUTH_TOKEN_LENGTH (65535 with the length word):
	// a client that has not logged in cannot make the router read or
	// allocate more.
	maxAuthMessage = 65535 - 4
)

var errCancelHandled = pgerr.New(pgerr.ProtocolViolation, "cancel request handled")

func randRead(b []byte) { rand.Read(b) }

// startup reads the startup packet, answering SSL and GSSENC requests on
// the way, and fills the connection's user, database and parameters. A
// CancelRequest is served and ends the connection.
func (c *clientConn) startup() error {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c.rd.r, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > maxStartup {
			return pgerr.New(pgerr.ProtocolViolation, "invalid length of startup packet")
		}
		body := make([]byte, n-8)
		if _, err := io.ReadFull(c.rd.r, body); err != nil {
			return err
		}
		switch code {
		case sslRequest:
			if c.srv.tls == nil || c.tlsDone {
				c.nc.Write([]byte{'N'})
				continue
			}
			if c.rd.r.Buffered() > 0 {
				// Bytes sent after SSLRequest before the handshake could be
				// injected by a man in the middle (CVE-2021-23214).
				return pgerr.New(pgerr.ProtocolViolation, "received unencrypted data after SSL request")
			}
			c.nc.Write([]byte{'S'})
			tc := tls.Server(c.nc, c.srv.tls)
			if err := tc.Handshake(); err != nil {
				return err
			}
			c.nc, c.tlsDone = tc, true
			c.rd.r = bufio.NewReaderSize(tc, 16<<10)
			c.w.Reset(tc)
			continue
		case gssencRequest:
			c.nc.Write([]byte{'N'})
			continue
		case cancelRequest:
			if len(body) >= 8 {
				c.srv.cancelRequest(binary.BigEndian.Uint32(body[:4]), binary.BigEndian.Uint32(body[4:8]))
			}
			return errCancelHandled
		}
		major, minor := code>>16, code&0xffff
		if major != 3 {
			return pgerr.New(pgerr.FeatureNotSupported, "unsupported frontend protocol %d.%d: server supports 3.0 to 3.0", major, minor)
		}
		params, unknown, err := parseStartupParams(body)
		if err != nil {
			return err
		}
		if minor > 0 || len(unknown) > 0 {
			// Newer minor versions and protocol options are declined, as
			// Postgres does, by NegotiateProtocolVersion.
			var b []byte
			b = binary.BigEndian.AppendUint32(b, 0)
			b = binary.BigEndian.AppendUint32(b, uint32(len(unknown)))
			for _, u := range unknown {
				b = append(b, u...)
				b = append(b, 0)
			}
			c.out = appendMsg(c.out, 'v', b)
		}
		return c.acceptParams(params)
	}
}

// parseStartupParams reads name/value pairs; _pq_. options are returned
// as unknown.
func parseStartupParams(b []byte) (map[string]string, []string, error) {
	params := map[string]string{}
	var unknown []string
	off := 0
	for off < len(b) && b[off] != 0 {
		name, next, err := cstring(b, off)
		if err != nil {
			return nil, nil, err
		}
		value, next2, err := cstring(b, next)
		if err != nil {
			return nil, nil, err
		}
		if strings.HasPrefix(name, "_pq_.") {
			unknown = append(unknown, name)
		} else {
			params[name] = value
		}
		off = next2
	}
	return params, unknown, nil
}

// acceptParams takes the startup parameters: user and database, options
// (-c name=value), and the rest as session settings.
func (c *clientConn) acceptParams(params map[string]string) error {
	c.user = params["user"]
	if c.user == "" {
		return pgerr.New("28000", "no PostgreSQL user name specified in startup packet")
	}
	c.database = params["database"]
	if c.database == "" {
		c.database = c.user
	}
	if params["replication"] != "" && params["replication"] != "false" && params["replication"] != "0" {
		return pgerr.New(pgerr.FeatureNotSupported, "replication connections are not supported through the router")
	}
	for name, value := range params {
		switch name {
		case "user", "database", "replication":
		case "options":
			if err := c.applyOptions(value); err != nil {
				return err
			}
		default:
			if err := c.startupSetting(name, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyOptions reads "-c name=value" and "--name=value" options.
func (c *clientConn) applyOptions(opts string) error {
	fields := strings.Fields(opts)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		var kv string
		switch {
		case f == "-c" && i+1 < len(fields):
			kv = fields[i+1]
			i++
		case strings.HasPrefix(f, "-c"):
			kv = f[2:]
		case strings.HasPrefix(f, "--"):
			kv = f[2:]
		default:
			return pgerr.New(pgerr.FeatureNotSupported, "startup option %q is not supported", f)
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return pgerr.New(pgerr.ProtocolViolation, "invalid startup option %q", kv)
		}
		if err := c.startupSetting(strings.ReplaceAll(name, "-", "_"), value); err != nil {
			return err
		}
	}
	return nil
}
