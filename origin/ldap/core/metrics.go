package core

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	ops    *prometheus.CounterVec
	active prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgefleet_core_operations_total",
			Help: "LDAP operations answered by the core, by LdapServer, operation and result.",
		}, []string{"server", "op", "result"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgefleet_core_connections_active",
			Help: "Client connections open on the core.",
		}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
