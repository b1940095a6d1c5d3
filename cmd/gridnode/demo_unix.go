//go:build unix

package main

import "syscall"

// demoProcAttr puts a demo node in a process group of its own: a Ctrl-C in
// the terminal then reaches the demo, which stops the nodes in order,
// and not the nodes themselves.
func demoProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
