// Package launch starts the servers a benchmark owns as real child
// processes: a gridnode built from this module, and throwaway etcd members
// on loopback ports. Each has its data in a temporary directory removed at
// Stop.
package launch
