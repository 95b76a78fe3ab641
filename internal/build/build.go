// Package build knows which dlqctl this is.
package build

import "runtime/debug"

// Version, Commit and Date are set by the release build's ldflags.
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info returns the version, falling back to the module build info (go
// install) and then to "dev".
func Info() (version, commit, date string) {
	version, commit, date = Version, Commit, Date
	if version != "" {
		return
	}
	version = "dev"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.time":
				if date == "" {
					date = s.Value
				}
			}
		}
	}
	return
}
