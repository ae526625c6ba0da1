package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tesseradb/tessera/cli"
	"github.com/tesseradb/tessera/dev/temporal"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// The test of separate hosts (separatehosts_test.go) runs each process of
// its cluster as this test binary started again inside a host's network
// namespace, told by one environment variable what to be. The binary
// already holds every part (the tessera commands, etcd, the Temporal
// server), so no other build is needed and the processes run the code
// under test.
const (
	// hostTesseraEnv: a JSON list of arguments; the process is `tessera
	// <arguments>` (an instance, a router, a worker) until SIGTERM.
	hostTesseraEnv = "TESSERA_E2E_HOST_TESSERA"
	// hostEtcdEnv: a JSON etcdembed.Options; the process is that etcd
	// member until SIGTERM.
	hostEtcdEnv = "TESSERA_E2E_HOST_ETCD"
	// hostTemporalEnv: the IP address a Temporal server listens on, at
	// port 7233, until SIGTERM.
	hostTemporalEnv = "TESSERA_E2E_HOST_TEMPORAL"
	// hostProbeEnv: a JSON sidecarProbe; the process runs it once and
	// prints its answer.
	hostProbeEnv = "TESSERA_E2E_HOST_PROBE"
)

// runHostProcess runs the host process an environment variable asks for;
// ok is false when none does.
func runHostProcess() (code int, ok bool) {
	if args := os.Getenv(hostTesseraEnv); args != "" {
		var list []string
		if err := json.Unmarshal([]byte(args), &list); err != nil {
			log.Print(err)
			return 2, true
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return cli.RunContext(ctx, list, os.Stdout, os.Stderr, cli.Options{}), true
	}
	if spec := os.Getenv(hostEtcdEnv); spec != "" {
		return runEtcdMember(spec), true
	}
	if host := os.Getenv(hostTemporalEnv); host != "" {
		return runTemporalHost(host), true
	}
	if spec := os.Getenv(hostProbeEnv); spec != "" {
		return runSidecarProbe(spec), true
	}
	return 0, false
}

func runEtcdMember(spec string) int {
	var opts etcdembed.Options
	if err := json.Unmarshal([]byte(spec), &opts); err != nil {
		log.Print(err)
		return 2
	}
	srv, err := etcdembed.Run(opts)
	if err != nil {
		log.Print(err)
		return 1
	}
	defer srv.Stop()
	waitForSignal()
	return 0
}

func runTemporalHost(host string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := temporal.Start(ctx, temporal.Config{Host: host, FrontendPort: temporal.DefaultFrontendPort, DisableUI: true,
		SearchAttributes: workflows.SearchAttributes})
	if err != nil {
		log.Print(err)
		return 1
	}
	defer srv.Stop()
	waitForSignal()
	return 0
}

func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
}

// sidecarProbe is one statement sent straight to a sidecar's session
// port with the cluster secret, as a router would send it: what a client
// that can still reach an instance could do.
type sidecarProbe struct {
	SessionAddr string
	Secret      string
	SQL         string
}

// probeAnswer is what the probe prints: whether the statement completed,
// else the SQLSTATE or error that ended it.
type probeAnswer struct {
	Completed bool
	Code      string
	Error     string
}

func runSidecarProbe(spec string) int {
	var p sidecarProbe
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		log.Print(err)
		return 2
	}
	ans := probe(p)
	out, _ := json.Marshal(ans)
	fmt.Println(string(out))
	return 0 // TestMain exits at once, a statement still running or not
}

func probe(p sidecarProbe) probeAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sess, err := sidecar.DialSession(ctx, p.SessionAddr, sidecar.DialOptions{Secret: p.Secret}, "postgres", "postgres", "")
	if err != nil {
		return probeAnswer{Error: err.Error()}
	}
	// No Close on the way out: a statement stuck on its backend would
	// hold it, and the process ends right after printing the answer.
	query := pgwire.AppendQuery(nil, p.SQL)
	done := make(chan probeAnswer, 1)
	go func() {
		var ans probeAnswer
		_, err := sess.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: query}, func(chunk []byte) error {
			return pgwire.Messages(chunk, func(typ byte, msg []byte) error {
				switch typ {
				case 'C':
					ans.Completed = true
				case 'E':
					e := pgwire.ParseError(msg)
					ans.Code, ans.Error = e.Code, e.Message
				}
				return nil
			})
		})
		if err != nil && ans.Error == "" {
			ans.Error = err.Error()
		}
		done <- ans
	}()
	select {
	case ans := <-done:
		return ans
	case <-ctx.Done():
		return probeAnswer{Error: "no answer within 3s"}
	}
}
