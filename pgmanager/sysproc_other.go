//go:build !linux

package pgmanager

import "syscall"

// setDeathSignal is a no-op where the kernel has no parent-death signal;
// there Stop and Close are the only guarantee that Postgres stops.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
