//go:build unix

package machinelock

import (
	"os"

	"golang.org/x/sys/unix"
)

// lock waits for an flock on f: exclusive or shared. flock locks belong to
// the open file, so two holders in one process are two holders.
func lock(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}
