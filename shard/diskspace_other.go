//go:build !unix

package shard

import "errors"

// diskSpace is not measured here: the data directory metrics are left out.
func diskSpace(string) (free, size uint64, err error) {
	return 0, 0, errors.New("shard: disk space not measured on this platform")
}
