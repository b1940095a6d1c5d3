// Package target maps the benchmark's operations (workload.Target) onto the
// stores under test: the grid through its Go client, Redis through
// go-redis (SET NX PX), etcd through its v3 client (lease + put-if-absent
// transaction) and PostgreSQL through pgx (an idempotency table of the
// cell's own: INSERT ... ON CONFLICT DO NOTHING). bench/README.md
// describes each mapping and why.
package target
