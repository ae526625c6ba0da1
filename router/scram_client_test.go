package router

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// A test-only SCRAM client, written from RFC 5802, to drive scramServer.

var testVerifier = func() string {
	salt := []byte("salt-0123")
	salted, _ := pbkdf2.Key(sha256.New, "pencil", salt, 4096, 32)
	clientKey := hmacSHA256(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	server := hmacSHA256(salted, "Server Key")
	return fmt.Sprintf("SCRAM-SHA-256$4096:%s$%s:%s", base64.StdEncoding.EncodeToString(salt),
		base64.StdEncoding.EncodeToString(stored[:]), base64.StdEncoding.EncodeToString(server))
}()

type testSCRAMClient struct {
	password, nonce, firstBare, authMessage string
	salted                                  []byte
}

func newTestSCRAMClient(pw string) *testSCRAMClient {
	return &testSCRAMClient{password: pw, nonce: "rOprNGfwEbeRWgbNEkqO"}
}

func (c *testSCRAMClient) first() string {
	c.firstBare = "n=,r=" + c.nonce
	return "n,," + c.firstBare
}

func (c *testSCRAMClient) final(serverFirst string) (string, error) {
	var nonce, salt string
	var iter int
	for _, a := range strings.Split(serverFirst, ",") {
		switch {
		case strings.HasPrefix(a, "r="):
			nonce = a[2:]
		case strings.HasPrefix(a, "s="):
			salt = a[2:]
		case strings.HasPrefix(a, "i="):
			fmt.Sscan(a[2:], &iter)
		}
	}
	s, _ := base64.StdEncoding.DecodeString(salt)
	c.salted, _ = pbkdf2.Key(sha256.New, c.password, s, iter, 32)
	withoutProof := "c=biws,r=" + nonce
	c.authMessage = c.firstBare + "," + serverFirst + "," + withoutProof
	clientKey := hmacSHA256(c.salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	sig := hmacSHA256(stored[:], c.authMessage)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ sig[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

func (c *testSCRAMClient) verify(serverFinal string) bool {
	want := "v=" + base64.StdEncoding.EncodeToString(hmacSHA256(hmacSHA256(c.salted, "Server Key"), c.authMessage))
	return hmac.Equal([]byte(want), []byte(serverFinal))
}
