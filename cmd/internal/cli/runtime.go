package cli

import "runtime"

// No edgefleet process serves or writes a heap profile, so none samples
// its allocations: at Go's default rate (one sample per 512 KiB) the
// stack walks of the samples were about 1.5 % of the edge's user-space
// instructions per short connection (callgrind, docs/benchmarks.md).
func init() { runtime.MemProfileRate = 0 }
