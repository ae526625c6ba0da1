// Package sidecarpb is the sidecar's gRPC API, generated from sidecar.proto.
// Regenerate with `go generate ./sidecar/sidecarpb` (needs protoc and the
// protoc-gen-go and protoc-gen-go-grpc plugins on PATH).
package sidecarpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative sidecar.proto
