package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// netLab is a network of hosts on one machine: each host a network
// namespace with an address of its own on one subnet, all joined by a
// bridge that lives in a namespace of its own (the switch), so that
// nothing the lab does touches the machine's own interfaces. The test
// process reaches the hosts through one more veth pair into the switch,
// with the subnet's first address. A host is cut off by detaching its
// port from the bridge (its packets are then silently dropped, as on a
// partitioned network), and killed by killing every process in its
// namespace. Close kills every process and removes every namespace.
type netLab struct {
	t      *testing.T
	id     string // unique to this run: in every name the lab creates
	subnet string // first three octets, as "10.231.17"
	sw     string // the switch namespace
	hosts  map[string]*labHost
	order  []string
	base   string // directory for the processes' files

	mu    sync.Mutex
	procs []*labProc
}

type labHost struct {
	name  string
	ns    string
	ip    string
	port  string // the switch's end of the host's veth pair
	index int
}

// labProc is one process running in a host.
type labProc struct {
	host string
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// newNetLab builds the switch and one host per name. It needs root and
// the ip command; a test calls requireNetLab first.
func newNetLab(t *testing.T, names ...string) *netLab {
	t.Helper()
	pid := os.Getpid()
	l := &netLab{t: t, id: strconv.Itoa(pid % 100000), subnet: fmt.Sprintf("10.231.%d", 20+pid%200), hosts: map[string]*labHost{}}
	l.sw = "tessera-" + l.id + "-switch"
	base, err := os.MkdirTemp("", "netlab-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755) // the postgres OS user must reach the instances' directories
	l.base = base
	t.Cleanup(l.close)
	l.ip("netns", "add", l.sw)
	l.ip("-n", l.sw, "link", "set", "lo", "up")
	l.ip("-n", l.sw, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.sw, "link", "set", "br0", "up")
	// The test process's own port on the switch.
	rootEnd, swEnd := "tl"+l.id+"r", "tl"+l.id+"rs"
	l.ip("link", "add", rootEnd, "type", "veth", "peer", "name", swEnd)
	l.ip("link", "set", swEnd, "netns", l.sw)
	l.ip("-n", l.sw, "link", "set", swEnd, "master", "br0", "up")
	l.ip("addr", "add", l.subnet+".1/24", "dev", rootEnd)
	l.ip("link", "set", rootEnd, "up")
	for i, name := range names {
		h := &labHost{name: name, ns: "tessera-" + l.id + "-" + name, ip: fmt.Sprintf("%s.%d", l.subnet, 10+i), index: i}
		hostEnd := fmt.Sprintf("tl%sh%d", l.id, i)
		h.port = fmt.Sprintf("tl%ss%d", l.id, i)
		l.ip("netns", "add", h.ns)
		l.hosts[name] = h
		l.order = append(l.order, name)
		l.ip("-n", h.ns, "link", "set", "lo", "up")
		l.ip("link", "add", hostEnd, "type", "veth", "peer", "name", h.port)
		l.ip("link", "set", hostEnd, "netns", h.ns)
		l.ip("link", "set", h.port, "netns", l.sw)
		l.ip("-n", h.ns, "link", "set", hostEnd, "name", "eth0")
		l.ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		l.ip("-n", h.ns, "link", "set", "eth0", "up")
		l.ip("-n", l.sw, "link", "set", h.port, "master", "br0", "up")
	}
	return l
}

// requireNetLab skips a test that cannot build a lab here: it needs root
// and the ip command (iproute2). CI runs as root with both, so there the
// test runs.
func requireNetLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: this test runs as root (as CI does) to build hosts of its own")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the ip command (iproute2) is missing; .ci/run installs it")
		}
		t.Skip("the ip command (iproute2) is missing")
	}
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// addr is host's address with port.
func (l *netLab) addr(host string, port int) string {
	return fmt.Sprintf("%s:%d", l.hosts[host].ip, port)
}

// start runs this test binary in host as the process env names
// (hostprocs_test.go), its output in a log file of its own.
func (l *netLab) start(host, name string, env ...string) *labProc {
	l.t.Helper()
	h := l.hosts[host]
	logFile, err := os.Create(filepath.Join(l.base, host+"-"+name+".log"))
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", h.ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	p := &labProc{host: host, name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { cmd.Wait(); logFile.Close(); close(p.done) }()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p
}

// startTessera runs `tessera args...` in host.
func (l *netLab) startTessera(host, name string, args ...string) *labProc {
	l.t.Helper()
	list, _ := json.Marshal(args)
	return l.start(host, name, hostTesseraEnv+"="+string(list))
}

// output returns what a process wrote.
func (l *netLab) output(p *labProc) string {
	b, _ := os.ReadFile(p.log.Name())
	return string(b)
}

// exited reports whether p has ended.
func (p *labProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// run runs this test binary in host as env says and returns its output.
func (l *netLab) run(host string, timeout time.Duration, env ...string) (string, error) {
	cmd := exec.Command("ip", "netns", "exec", l.hosts[host].ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("no answer within %v", timeout)
	}
}

// kill kills every process of host at once, Postgres's included: the
// host loses power.
func (l *netLab) kill(host string) {
	l.t.Helper()
	l.killNamespace(l.hosts[host].ns)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.procs {
		if p.host == host {
			<-p.done
		}
	}
}

func (l *netLab) killNamespace(ns string) {
	for range 50 {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cut detaches host from the network: its packets go nowhere and nothing
// reaches it, with no error on either side, as in a partition. heal
// undoes it.
func (l *netLab) cut(host string) {
	l.ip("-n", l.sw, "link", "set", l.hosts[host].port, "nomaster")
}

func (l *netLab) heal(host string) {
	l.ip("-n", l.sw, "link", "set", l.hosts[host].port, "master", "br0")
}

// stop ends p with SIGTERM, waiting up to grace before killing it.
func (l *netLab) stop(p *labProc, grace time.Duration) {
	if p.exited() {
		return
	}
	// ip netns exec execs the binary, so the pid is the process's own.
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// close stops every process (SIGTERM, then SIGKILL for what is left in
// each namespace), removes the namespaces and the test's own veth, and
// the files, unless the test failed: then the processes' logs are kept
// and named.
func (l *netLab) close() {
	l.mu.Lock()
	procs := append([]*labProc(nil), l.procs...)
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); l.stop(p, 20*time.Second) }()
	}
	wg.Wait()
	for _, name := range l.order {
		l.killNamespace(l.hosts[name].ns)
		exec.Command("ip", "netns", "del", l.hosts[name].ns).Run()
	}
	exec.Command("ip", "netns", "del", l.sw).Run()
	exec.Command("ip", "link", "del", "tl"+l.id+"r").Run()
	if l.t.Failed() {
		l.t.Logf("the hosts' logs are kept in %s", l.base)
		return
	}
	os.RemoveAll(l.base)
}
