// Package listenaddr checks a configuration's listen addresses before
// anything listens: SelfTarget (a forward target that reaches one of them,
// so that the relay would forward to itself) and Overlap (two that Linux
// cannot both bind). Both follow the same rules: a wildcard host covers
// every address, an IPv4-mapped address is its IPv4 twin, port 0 matches
// nothing.
//
//	if err := listenaddr.Overlap(cfg.Listen); err != nil { ... }
//	if l := listenaddr.SelfTarget(cfg.Listen, origin); l != "" { ... } // a loop
package listenaddr
