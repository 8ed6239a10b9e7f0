// Package version holds the build's version string, set at link time with
// -ldflags "-X github.com/edgefleet/edgefleet/internal/version.Version=…".
package version

// Version is the release this binary was built from; "dev" for go build.
var Version = "dev"
