// Package loopguard keeps a relay from relaying to itself at run time:
// Own is the set of its open outbound sockets, and a connection accepted
// from one of them is a loop, cut whichever side registers first. The
// start-time check of a target that is one of the listen addresses is
// internal/listenaddr's SelfTarget.
//
//	own := loopguard.NewOwn()
//	own.Dialed(local, remote)         // an outbound socket; true: a loop, close it
//	own.Accepted(remote, local, conn) // an accepted one; true: a loop, close it
package loopguard
