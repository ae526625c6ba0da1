package pgmanager

import "syscall"

// setDeathSignal asks the kernel to send sig to the child when the thread
// that started it dies, so that a Postgres process never outlives
// pgmanager's process, even after a kill -9. Go applies it after switching
// credentials (a credential change would otherwise clear it). Because it
// is tied to the starting OS thread, callers start children from a
// goroutine locked to its thread for the child's whole life.
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) { attr.Pdeathsig = sig }
