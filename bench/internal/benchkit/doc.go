// Package benchkit holds what the benchmark programs under bench/ share:
// starting and stopping the proxies they compare (StartTargets, and the
// HAProxy they all compare with), what a round measures through each
// (Result: connection rate, throughput, idle cost), reading a process's
// RSS, file descriptors and CPU time from /proc, the loopback sink/echo
// service and the client loops that measure throughput, connection rate
// and idle cost, the shapes the relays are measured in (Shape: shared,
// or cheap-vm — each relay pinned alone to one CPU under a cgroup CPU
// cap), and the pieces of the Markdown report. Linux only.
//
//	dir, cleanup, err := benchkit.TempDir("edge", *keep)
//	cmd, err := benchkit.Start(dir, "haproxy", "haproxy", "-db", "-f", cfg)
//	cr := benchkit.ConnRate(32, 15000, 3*time.Second, func() error { return benchkit.EchoOnce(dial, []byte{'E'}) })
package benchkit
