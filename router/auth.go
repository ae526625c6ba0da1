package router

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// Authentication request codes.
const (
	authOK          = 0
	authMD5         = 5
	authSASL        = 10
	authSASLContine = 11
	authSASLFinal   = 12
)

// authenticate checks the client's password against the authoritative
// shard's roles, as Postgres would: SCRAM-SHA-256, or md5 for a role whose
// stored secret is md5. A wrong password, an unknown role and a role
// without a password all look the same to the client (28P01).
func (c *clientConn) authenticate(ctx context.Context) error {
	r, known, dbExists, err := c.srv.roles.get(ctx, c.user, c.database)
	if err != nil {
		return pgerr.New("08006", "cannot reach the authoritative shard to authenticate: %v", err)
	}
	var ok bool
	if c.admission.method == hbaTrust {
		// Trusted: no password, but the role must exist, as in Postgres.
		if !known {
			return pgerr.New("28000", "role %q does not exist", c.user)
		}
		ok = true
	} else if ok, err = c.checkPassword(ctx, r, known); err != nil {
		return err
	}
	if !ok {
		// The password may have changed since the roles were fetched: a
		// next attempt reads them afresh (at most once a refreshInterval).
		c.srv.roles.missed()
		return pgerr.New("28P01", "password authentication failed for user %q", c.user)
	}
	if !r.canLogin {
		return pgerr.New("28000", "role %q is not permitted to log in", c.user)
	}
	// VALID UNTIL bounds the password, so trust ignores it, as in Postgres.
	if c.admission.method != hbaTrust && !r.validUntil.IsZero() && time.Now().After(r.validUntil) {
		return pgerr.New("28P01", "password authentication failed for user %q", c.user)
	}
	if err := c.srv.countRole(c, c.user, r); err != nil {
		return err
	}
	if !dbExists {
		return pgerr.New("3D000", "database %q does not exist", c.database)
	}
	c.out = appendMsg(c.out, 'R', binary.BigEndian.AppendUint32(nil, authOK))
	return nil
}

// checkPassword runs the exchange the role's secret calls for.
func (c *clientConn) checkPassword(ctx context.Context, r role, known bool) (bool, error) {
	// md5 only for a role whose secret is md5 (and never under a
	// scram-sha-256 rule): every other role, known or not, is offered
	// SCRAM-SHA-256, so the offer does not tell whether a role exists.
	if c.admission.method == hbaMD5 && known && len(r.verifier) == 35 && r.verifier[:3] == "md5" {
		var salt [4]byte
		randRead(salt[:])
		c.out = appendMsg(c.out, 'R', binary.BigEndian.AppendUint32(nil, authMD5), salt[:])
		resp, err := c.authMessage()
		if err != nil {
			return false, err
		}
		pw, _, err := cstring(resp, 0)
		if err != nil {
			return false, err
		}
		return md5Matches(r.verifier, salt, pw), nil
	}
	v := mockVerifier(c.srv.mockSaltKey, c.user)
	real := false
	if known {
		if parsed, err := parseSCRAMVerifier(r.verifier); err == nil {
			v, real = parsed, true
		}
	}
	c.out = appendMsg(c.out, 'R', binary.BigEndian.AppendUint32(nil, authSASL), cstr("SCRAM-SHA-256"), []byte{0})
	resp, err := c.authMessage()
	if err != nil {
		return false, err
	}
	mech, off, err := cstring(resp, 0)
	if err != nil || len(resp) < off+4 {
		return false, pgerr.New(pgerr.ProtocolViolation, "malformed SASLInitialResponse")
	}
	if mech != "SCRAM-SHA-256" {
		return false, pgerr.New(pgerr.ProtocolViolation, "client selected an invalid SASL authentication mechanism")
	}
	n := int(int32(binary.BigEndian.Uint32(resp[off:])))
	if n < 0 || off+4+n > len(resp) {
		return false, pgerr.New(pgerr.ProtocolViolation, "malformed SASLInitialResponse")
	}
	srv := &scramServer{v: v}
	first, err := srv.first(string(resp[off+4 : off+4+n]))
	if err != nil {
		return false, pgerr.New(pgerr.ProtocolViolation, "%v", err)
	}
	c.out = appendMsg(c.out, 'R', binary.BigEndian.AppendUint32(nil, authSASLContine), []byte(first))
	resp, err = c.authMessage()
	if err != nil {
		return false, err
	}
	final, err := srv.final(string(resp))
	if err == errWrongPassword {
		return false, nil
	}
	if err != nil {
		return false, pgerr.New(pgerr.ProtocolViolation, "%v", err)
	}
	if !real {
		return false, nil
	}
	c.out = appendMsg(c.out, 'R', binary.BigEndian.AppendUint32(nil, authSASLFinal), []byte(final))
	return true, nil
}

// authMessage flushes what is queued and reads the client's next
// authentication message ('p').
func (c *clientConn) authMessage() ([]byte, error) {
	if err := c.flush(); err != nil {
		return nil, err
	}
	typ, msg, err := c.rd.next()
	if err != nil {
		return nil, err
	}
	if typ != 'p' {
		return nil, pgerr.New(pgerr.ProtocolViolation, "expected a password response, got message type %q", typ)
	}
	return append([]byte(nil), msg[5:]...), nil
}
