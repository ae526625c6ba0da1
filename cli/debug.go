package cli

import (
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/spf13/cobra"
)

// debugFlag adds --debug-addr, which serves Go's profiler (pprof) there
// for looking at a running process's CPU and memory.
func debugFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "debug-addr", "", "serve pprof profiles on this address (for example 127.0.0.1:6060)")
}

func serveDebug(addr string) error {
	if addr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go http.Serve(lis, mux)
	return nil
}
