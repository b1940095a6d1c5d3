package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/l4xg/grid", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name, version string
		bi            *debug.BuildInfo
		want, commit  string
	}{
		{"release", "1.2.0", stamped, "1.2.0 (commit 0123456789ab, modified) go1.26.0", "0123456789ab-modified"},
		{"dev build", "dev", stamped, "dev (commit 0123456789ab, modified) go1.26.0", "0123456789ab-modified"},
		{"go install of a tag", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0 go1.26.0", "unknown"},
	} {
		i := fromBuildInfo(tc.version, tc.bi)
		if got := i.String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got := i.CommitLabel(); got != tc.commit {
			t.Errorf("%s: commit label %q, want %q", tc.name, got, tc.commit)
		}
	}
}

// TestReadThisBinary: the test binary has build information, whose Go
// version is the running one.
func TestReadThisBinary(t *testing.T) {
	if i := Read(""); i.GoVersion != runtime.Version() || i.Version == "" {
		t.Fatalf("%+v, want Go %s and a version", i, runtime.Version())
	}
}
