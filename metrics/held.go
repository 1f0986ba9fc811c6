package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rscoord/rsc/coordinator"
)

// watchHeld registers rsc_heartbeats_held: the heartbeats the coordinator
// holds now (commands/hold.go), read at scrape time.
func (m *Metrics) watchHeld(c *coordinator.Coordinator) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rsc_heartbeats_held",
		Help: "Heartbeats held now, waiting for a change of their answer or their bound (X-Rsc-Hold-Ms); at most --max-held-heartbeats.",
	}, func() float64 { return float64(c.HeldHeartbeats()) }))
}
