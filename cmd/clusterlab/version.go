package main

import (
	"runtime/debug"
	"strings"
)

// versionString is what clusterlab --version prints: the module version (as go install
// records it; "(devel)" in a checkout), the VCS revision and time the binary was built
// from (with "+dirty" for uncommitted changes), and the Go version.
func versionString(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "clusterlab (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	parts := []string{"clusterlab " + version}
	if rev := settings["vcs.revision"]; rev != "" {
		r := rev
		if settings["vcs.modified"] == "true" {
			r += "+dirty"
		}
		if t := settings["vcs.time"]; t != "" {
			r += " (" + t + ")"
		}
		parts = append(parts, "revision "+r)
	}
	parts = append(parts, bi.GoVersion)
	if goos, goarch := settings["GOOS"], settings["GOARCH"]; goos != "" {
		parts = append(parts, goos+"/"+goarch)
	}
	return strings.Join(parts, ", ")
}

func init() {
	rootCmd.Version = versionString(debug.ReadBuildInfo())
	rootCmd.SetVersionTemplate("{{.Version}}\n")
}
