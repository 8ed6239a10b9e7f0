// Package pipepool is the process's pool of kernel pipes, the buffers of
// splice(2): the core's blocking copy (internal/splice) and the relays'
// event loops (internal/evloop) take one while bytes flow and give it
// back as soon as it is empty, so an idle connection holds none.
//
//	p, err := pipepool.Get() // non-blocking ends p.R and p.W, 1 MiB asked for
//	...                      // splice into p.W, out of p.R until empty
//	pipepool.Put(p)          // or p.Close() when it may still hold bytes
package pipepool
