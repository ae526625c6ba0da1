package sidecar

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Every call must carry the cluster's shared secret as a bearer token:
// nothing reaches Postgres through a sidecar without it.
const authHeader = "authorization"

func checkSecret(ctx context.Context, secret string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(authHeader) {
		token, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(token), []byte(secret)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "the cluster credential is missing or wrong")
}

func unaryAuth(secret string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkSecret(ctx, secret); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func streamAuth(secret string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkSecret(ss.Context(), secret); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// secretCredentials attaches the shared secret to every call a client
// makes.
type secretCredentials struct {
	secret     string
	requireTLS bool
}

func (c secretCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{authHeader: "Bearer " + c.secret}, nil
}

func (c secretCredentials) RequireTransportSecurity() bool { return c.requireTLS }
