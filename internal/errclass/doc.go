// Package errclass classifies the errors of sockets and dials by what
// they say about this host: LocalResources (it ran out of descriptors,
// memory or ports, so the peer is not to blame), Temporary (an accept
// error that waiting cures) and DescriptorShortage (is a shortage under
// way now). Every server asks it before marking a peer down or giving up
// on a listener.
//
//	if errclass.LocalResources(err) { // the next server would fail the same way
//		return err
//	}
package errclass
