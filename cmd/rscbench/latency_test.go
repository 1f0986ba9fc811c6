package main

import (
	"os"
	"strings"
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
)

// TestMain lets the test binary stand in for rscbench as a latency member
// process (the benchmark starts its own executable).
func TestMain(m *testing.M) {
	if os.Getenv(latencyMemberEnv) != "" {
		os.Exit(runLatencyMember())
	}
	os.Exit(m.Run())
}

// TestLatencyTiny runs the latency benchmark's phases once with held
// heartbeats (plain ones would wait the 15 s lease for the killed member)
// and checks the report: every phase measured, nothing published left
// unhandled, the memory of a held heartbeat measured.
func TestLatencyTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "latency", "--modes", "held", "--phase", "2s", "--rate", "50", "--restart-spacing", "300ms",
		"--held-requests", "20", "--redis", srv.URL(), "-json")
	got := checkReport(t, decodeReport(t, r.stdout), "latency.holds", "latency.phases")
	for _, ph := range latencyPhases {
		if n := value(t, got, "latency.phases", "held: "+ph+" messages"); n < 50 {
			t.Errorf("%s: %v messages, want the phase's (about 100)", ph, n)
		}
		if _, lost := got["latency.phases"]["held: "+ph+" never handled"]; lost {
			t.Errorf("%s: messages never handled", ph)
		}
	}
	if v := value(t, got, "latency.holds", "held heartbeat"); v <= 0 {
		t.Errorf("memory of a held heartbeat: %v KiB", v)
	}
	if strings.Contains(r.stdout, `"plain: `) {
		t.Error("--modes held ran plain heartbeats too")
	}
	noKeysLeft(t, srv)
}
