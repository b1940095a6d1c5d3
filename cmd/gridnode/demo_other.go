//go:build !unix

package main

import "syscall"

// demoProcAttr: no process groups to set up here.
func demoProcAttr() *syscall.SysProcAttr { return nil }
