//go:build unix

package shard

import "golang.org/x/sys/unix"

// diskSpace is the bytes available to this process and the size of the
// file system holding dir.
func diskSpace(dir string) (free, size uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}
