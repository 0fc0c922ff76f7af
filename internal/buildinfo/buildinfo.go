package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Info is what a binary knows about how it was built.
type Info struct {
	Module    string // module path, e.g. github.com/chunkraft/chunkraft
	Version   string // module version: a tag, a pseudo-version or "(devel)"
	Commit    string // VCS revision; "" when the build was not stamped
	Time      string // commit time (RFC 3339); "" when not stamped
	Dirty     bool   // the working tree had uncommitted changes
	GoVersion string // e.g. go1.26.8
	Platform  string // GOOS/GOARCH
}

// Read returns the running binary's build information. A binary built
// without module support (or a test binary) reports what it can: the Go
// version always, the rest when stamped.
func Read() Info {
	info := Info{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.Module, info.Version, info.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Dirty = s.Value == "true"
		}
	}
	return info
}

// String is one line: module and version, commit (with "dirty" when the
// tree was modified), commit time, and Go version and platform, e.g.
//
//	github.com/chunkraft/chunkraft (devel), commit 2686c24d... (dirty, 2026-12-01T08:00:00Z), go1.26.8 linux/amd64
func (i Info) String() string {
	mod, ver := i.Module, i.Version
	if mod == "" {
		mod = "unknown module"
	}
	if ver == "" {
		ver = "(unknown version)"
	}
	commit := "commit unknown (not built from a VCS checkout)"
	if i.Commit != "" {
		commit = "commit " + i.Commit
		detail := ""
		if i.Dirty {
			detail = "dirty"
		}
		if i.Time != "" {
			if detail != "" {
				detail += ", "
			}
			detail += i.Time
		}
		if detail != "" {
			commit += " (" + detail + ")"
		}
	}
	return fmt.Sprintf("%s %s, %s, %s %s", mod, ver, commit, i.GoVersion, i.Platform)
}

// Line is what --version prints for the command name: "<name> <String()>".
func Line(name string) string { return name + " " + Read().String() }

// SetCobraVersion gives cmd a --version flag that prints Line(cmd.Name()).
func SetCobraVersion(cmd *cobra.Command) {
	cmd.Version = Read().String()
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
}
