// Package target maps the benchmark's operations (workload.Target) onto the
// stores under test: the grid through its Go client, Redis through
// go-redis (SET NX PX) and etcd through its v3 client (lease + put-if-absent
// transaction). bench/README.md describes each mapping and why.
package target
