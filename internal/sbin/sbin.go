// Package sbin finds a program on PATH or, failing that, in the sbin
// directories where Debian puts iptables, haproxy, slapd and named, which a
// non-root PATH may lack.
//
//	path, err := sbin.LookPath("iptables-nft")
package sbin

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// dirs are searched, in order, after PATH.
var dirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// LookPath is exec.LookPath(name), then each of dirs.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH or in %v", name, dirs)
}
