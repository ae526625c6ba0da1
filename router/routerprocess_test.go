package router_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo/store"
)

// routerProcessEnv, when set to a JSON routerProcessSpec, makes the test
// binary run a router on the package's cluster until it is killed: a
// router in a process of its own, whose death is a real crash (its
// connections to the sidecars end, its memory is gone).
const routerProcessEnv = "TESSERA_ROUTER_TEST_PROCESS"

type routerProcessSpec struct {
	Etcd       []string
	Cluster    string
	SecretFile string
	// KillStep, when set, is an atomic-commit step (router.CommitSteps)
	// at whose KillAt-th occurrence the process kills itself (SIGKILL).
	KillStep string
	KillAt   int64
}

// runRouterProcess is the child's side: it prints the router's address
// on stdout once it listens.
func runRouterProcess(spec string) int {
	var sp routerProcessSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	st, err := store.Dial(ctx, sp.Etcd, sp.Cluster)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	secret, err := os.ReadFile(sp.SecretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if sp.KillStep != "" {
		var seen atomic.Int64
		router.SetCommitStepHook(func(step string) {
			if step == sp.KillStep && seen.Add(1) == sp.KillAt {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		})
	}
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: st, Secret: strings.TrimSpace(string(secret))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(r.Addr())
	select {}
}

// routerProcess is a router running in a child process.
type routerProcess struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has ended
}

// startRouterProcess starts a router process that kills itself at the
// killAt-th occurrence of step (none when step is empty). It may be called
// from any goroutine of the test.
func startRouterProcess(t *testing.T, step string, killAt int) (*routerProcess, error) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(cluster.Secret()), 0o600); err != nil {
		return nil, err
	}
	spec, _ := json.Marshal(routerProcessSpec{Etcd: cluster.Info().Etcd, Cluster: cluster.Info().Cluster,
		SecretFile: secretFile, KillStep: step, KillAt: int64(killAt)})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), routerProcessEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &routerProcess{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	select {
	case p.addr = <-addr:
		if p.addr == "" {
			return nil, fmt.Errorf("the router process ended before it listened")
		}
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("the router process did not listen within 60 s")
	}
	return p, nil
}

// killedItself reports whether the ended process died of SIGKILL (its
// own, at its step) rather than exiting.
func (p *routerProcess) killedItself() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// kill ends the process (SIGKILL) and waits for it.
func (p *routerProcess) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}
