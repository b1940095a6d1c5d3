// Package buildinfo says what a gridnode binary was built from: its
// version, the VCS revision and whether the tree had changes, and the Go
// version, as the Go toolchain records them in the binary
// (debug.ReadBuildInfo). gridnode prints it (gridnode version), logs it at
// start and exports it as the l4xg_grid_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Info is what a binary was built from. Empty fields are unknown: a test
// binary, or a build without VCS stamping (-buildvcs=false).
type Info struct {
	Version   string // the release (-ldflags -X main.version), else the module's version, else "dev"
	Commit    string // vcs.revision
	Modified  bool   // vcs.modified: the tree had uncommitted changes
	GoVersion string
}

// Read reads the running binary's build information. version is the one
// the build set (-ldflags "-X main.version=..."), "" or "dev" when none.
func Read(version string) Info {
	i := Info{Version: version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if i.Version == "" {
			i.Version = "dev"
		}
		return i
	}
	return fromBuildInfo(version, bi)
}

// fromBuildInfo is Read over given build information.
func fromBuildInfo(version string, bi *debug.BuildInfo) Info {
	i := Info{Version: version, GoVersion: bi.GoVersion}
	if i.Version == "" || i.Version == "dev" {
		i.Version = "dev"
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			i.Version = v
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the one-line form gridnode version prints: "1.2.0 (commit
// 0123456789ab, modified) go1.26.0".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Commit != "" {
		fmt.Fprintf(&b, " (commit %s", short(i.Commit))
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	if i.GoVersion != "" {
		b.WriteString(" " + i.GoVersion)
	}
	return b.String()
}

// CommitLabel is the commit as a metric label: the short revision, with
// "-modified" when the tree had changes, "unknown" when not recorded.
func (i Info) CommitLabel() string {
	if i.Commit == "" {
		return "unknown"
	}
	if i.Modified {
		return short(i.Commit) + "-modified"
	}
	return short(i.Commit)
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
