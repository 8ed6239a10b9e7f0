package origin

import "github.com/edgefleet/edgefleet/internal/proxyheader"

// verdict is the trust policy's decision on a connection once its first
// bytes are known.
type verdict struct {
	result string // "" to go on (parse the header, or forward as is)
	msg    string // log message when refused
}

// judge applies the trust rules of docs/origin.md to a connection from a source
// that is (or is not) inside trusted_edges and whose first bytes are k.
// untrusted: reject is decided earlier, before any byte is read.
func judge(trusted bool, k proxyheader.Kind, requireHeader bool) verdict {
	switch {
	case !trusted && k != proxyheader.None:
		return verdict{ResultSpoofed, "spoofed proxy header"}
	case trusted && k == proxyheader.None && requireHeader:
		return verdict{ResultNoHeader, "proxy header required"}
	}
	return verdict{}
}
