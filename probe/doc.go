// Package probe is the agent's half of edgefleet: it ranks the edges a
// name resolves to by a full probe of each (TCP connect, TLS handshake
// verified against the name, one LDAP round trip), keeps the ranking in a
// state file, dials through the best edge, watches for a better one beside
// a live session, and — on the platform side — monitors every edge.
//
//	conf, err := probe.ClientTLS("ca.pem", "agent.pem", "agent-key.pem", "ldap.example.com")
//	cfg := probe.DefaultConfig()
//	cfg.Name, cfg.State = "ldap.example.com", "/var/lib/agent/edges.json"
//	d, err := probe.NewDialer(cfg, conf)
//	conn, err := d.DialContext(ctx) // the best reachable edge, else the name
//	w, err := probe.NewWatcher(d)
//	go w.Run(ctx, events) // better-edge, edge-left: reconnect, no backoff
//
// Selection is never a new failure mode: whenever it cannot choose (DNS
// error, fewer than two addresses, nobody answers, a state file that
// cannot be read or written) the agent dials the hostname exactly as it
// would without edgefleet. docs/probe.md gives every rule its reason.
package probe
