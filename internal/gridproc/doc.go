// Package gridproc runs servers as child processes for the demo, the
// benchmark tool and the tests that need a real process (kill -9, SIGSTOP,
// a network namespace): it starts one, watches its stdout for the ready
// lines "gridnode serve" prints once it serves, and stops it.
//
// gridnode serve prints, on stdout, "ready: http ADDR" (when it serves
// HTTP) and then "ready: grpc ADDR" once every shard it hosts has a
// serving leader. The grpc line is the one waited for; an http line before
// it gives the HTTP address. A process that prints no ready line (an etcd
// member) is started and stopped the same way, and its readiness is the
// caller's to judge.
package gridproc
