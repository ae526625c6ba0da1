package temporal

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// The ports this process has picked for servers that are still running.
// The kernel rarely hands out the same ephemeral port twice in a row, but
// two servers started in parallel by one test binary must never share one,
// so a port picked here is not picked again until its server stops.
var (
	pickedMu sync.Mutex
	picked   = map[string]bool{}
)

// pickPort returns a port on ip that is free now and not held by another
// server of this process, and marks it held. The port is free, not bound:
// another process could still take it before the server binds it.
func pickPort(ip string) (int, error) {
	pickedMu.Lock()
	defer pickedMu.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, fmt.Errorf("picking a free port on %s: %w", ip, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		key := net.JoinHostPort(ip, strconv.Itoa(port))
		if !picked[key] {
			picked[key] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("picking a free port on %s: no new port after 100 tries", ip)
}

// releasePort makes a port picked by pickPort available to pick again.
func releasePort(ip string, port int) {
	pickedMu.Lock()
	defer pickedMu.Unlock()
	delete(picked, net.JoinHostPort(ip, strconv.Itoa(port)))
}

// checkPortFree reports an error if ip:port cannot be bound now, so that a
// port another program holds is reported as such rather than as a failure
// deep inside the Temporal server.
func checkPortFree(ip string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d on %s is not free: %w", port, ip, err)
	}
	return ln.Close()
}
