// Package tmpfs mounts small file systems of a fixed size, so that fault
// tests (the chaos tool's full disks, the node's disk reserve) can fill a
// disk without touching the machine's. Mounting needs root.
package tmpfs

import (
	"fmt"
	"os/exec"
	"strings"
)

// Mount mounts a tmpfs of size bytes on dir.
func Mount(dir string, size int64) error {
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Unmount unmounts the file system on dir.
func Unmount(dir string) error {
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}
