package router

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// scramVerifier is a role's stored SCRAM-SHA-256 secret as pg_authid
// keeps it: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>.
type scramVerifier struct {
	iterations int
	salt       []byte
	storedKey  []byte
	serverKey  []byte
}

func parseSCRAMVerifier(s string) (*scramVerifier, error) {
	rest, ok := strings.CutPrefix(s, "SCRAM-SHA-256$")
	if !ok {
		return nil, errors.New("not a SCRAM-SHA-256 verifier")
	}
	iterSalt, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return nil, errors.New("malformed SCRAM verifier")
	}
	iter, salt, ok1 := strings.Cut(iterSalt, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return nil, errors.New("malformed SCRAM verifier")
	}
	v := &scramVerifier{}
	var err error
	if v.iterations, err = strconv.Atoi(iter); err != nil || v.iterations < 1 {
		return nil, errors.New("malformed SCRAM iteration count")
	}
	if v.salt, err = base64.StdEncoding.DecodeString(salt); err != nil {
		return nil, err
	}
	if v.storedKey, err = base64.StdEncoding.DecodeString(stored); err != nil {
		return nil, err
	}
	if v.serverKey, err = base64.StdEncoding.DecodeString(server); err != nil {
		return nil, err
	}
	return v, nil
}

// mockVerifier stands in for a role that does not exist or has no SCRAM
// secret, so the exchange looks the same and reveals nothing; it can never
// succeed. As Postgres's scram_mock_salt, its salt is derived from the
// role's name, keyed (with mockSaltKey) by the cluster secret, so that
// every attempt, on every router, shows the same salt for the same name,
// as a real role's does.
func mockVerifier(key []byte, user string) *scramVerifier {
	v := &scramVerifier{iterations: 4096, storedKey: make([]byte, 32), serverKey: make([]byte, 32)}
	v.salt = hmacSHA256(key, user)[:16]
	rand.Read(v.storedKey)
	rand.Read(v.serverKey)
	return v
}

// mockSaltKey derives the key of mock salts from the cluster secret.
func mockSaltKey(secret string) []byte {
	return hmacSHA256([]byte(secret), "tessera scram mock salt")
}

// scramServer runs the server side of one SCRAM-SHA-256 exchange
// (RFC 5802, RFC 7677) as Postgres does, without channel binding.
type scramServer struct {
	v               *scramVerifier
	clientFirstBare string
	serverFirst     string
	gs2Header       string
	nonce           string
}

// first takes the client-first-message and returns the server-first one.
func (s *scramServer) first(clientFirst string) (string, error) {
	// gs2-header: "n,," (no channel binding), "y,," (client could bind but
	// thinks we cannot); "p=" asks for binding we did not offer.
	var rest string
	switch {
	case strings.HasPrefix(clientFirst, "n,"), strings.HasPrefix(clientFirst, "y,"):
		i := strings.Index(clientFirst[2:], ",")
		if i < 0 {
			return "", errors.New("malformed SCRAM client-first-message")
		}
		s.gs2Header = clientFirst[:2+i+1]
		rest = clientFirst[2+i+1:]
	case strings.HasPrefix(clientFirst, "p="):
		return "", errors.New("channel binding was not offered")
	default:
		return "", errors.New("malformed SCRAM client-first-message")
	}
	s.clientFirstBare = rest
	var clientNonce string
	for _, attr := range strings.Split(rest, ",") {
		if v, ok := strings.CutPrefix(attr, "r="); ok {
			clientNonce = v
		}
		if strings.HasPrefix(attr, "m=") {
			return "", errors.New("SCRAM extensions are not supported")
		}
	}
	if clientNonce == "" {
		return "", errors.New("SCRAM client nonce missing")
	}
	var raw [18]byte
	rand.Read(raw[:])
	s.nonce = clientNonce + base64.StdEncoding.EncodeToString(raw[:])
	s.serverFirst = fmt.Sprintf("r=%s,s=%s,i=%d", s.nonce, base64.StdEncoding.EncodeToString(s.v.salt), s.v.iterations)
	return s.serverFirst, nil
}

// final checks the client-final-message's proof and returns the
// server-final-message, or an error if the proof is wrong.
func (s *scramServer) final(clientFinal string) (string, error) {
	i := strings.LastIndex(clientFinal, ",p=")
	if i < 0 {
		return "", errors.New("SCRAM proof missing")
	}
	withoutProof, proofB64 := clientFinal[:i], clientFinal[i+3:]
	var channel, nonce string
	for _, attr := range strings.Split(withoutProof, ",") {
		if v, ok := strings.CutPrefix(attr, "c="); ok {
			channel = v
		} else if v, ok := strings.CutPrefix(attr, "r="); ok {
			nonce = v
		}
	}
	if channel != base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) {
		return "", errors.New("SCRAM channel binding mismatch")
	}
	if nonce != s.nonce {
		return "", errors.New("SCRAM nonce mismatch")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != sha256.Size {
		return "", errors.New("malformed SCRAM proof")
	}
	authMessage := s.clientFirstBare + "," + s.serverFirst + "," + withoutProof
	clientSignature := hmacSHA256(s.v.storedKey, authMessage)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ clientSignature[i]
	}
	stored := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(stored[:], s.v.storedKey) != 1 {
		return "", errWrongPassword
	}
	return "v=" + base64.StdEncoding.EncodeToString(hmacSHA256(s.v.serverKey, authMessage)), nil
}

var errWrongPassword = errors.New("wrong password")

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
