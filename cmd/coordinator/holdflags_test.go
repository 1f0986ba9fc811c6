package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/coordinator"
)

// TestHeldHeartbeatFlags: the held heartbeats' flags take the documented
// defaults, and a hold the server could not answer within its write
// timeout, or a bound of 0, is refused naming the flag (negative turns a
// bound or the grace off).
func TestHeldHeartbeatFlags(t *testing.T) {
	parse := func(args ...string) (*Main, error) {
		m := NewMain()
		m.Stderr = &apiSyncBuffer{}
		return m, m.ParseFlags(args)
	}
	m, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if m.MaxHeartbeatHold != coordinator.DefaultMaxHeartbeatHold || m.MaxHeldHeartbeats != 10000 || m.MaxHeldHeartbeatsPerPrincipal != 2500 || m.HeartbeatDropGrace != time.Second {
		t.Fatalf("defaults: hold %v, held %d, per principal %d, grace %v", m.MaxHeartbeatHold, m.MaxHeldHeartbeats, m.MaxHeldHeartbeatsPerPrincipal, m.HeartbeatDropGrace)
	}
	for _, c := range []struct {
		args []string
		flag string // "" when accepted
	}{
		{[]string{"--max-heartbeat-hold", "50s"}, ""},
		{[]string{"--max-heartbeat-hold", "51s"}, "--max-heartbeat-hold"},
		{[]string{"--max-heartbeat-hold", "0s"}, "--max-heartbeat-hold"},
		{[]string{"--max-held-heartbeats", "-1"}, ""},
		{[]string{"--max-held-heartbeats", "0"}, "--max-held-heartbeats"},
		{[]string{"--max-held-heartbeats-per-principal", "0"}, "--max-held-heartbeats-per-principal"},
		{[]string{"--heartbeat-drop-grace", "-1s"}, ""},
		{[]string{"--heartbeat-drop-grace", "0s"}, "--heartbeat-drop-grace"},
	} {
		_, err := parse(c.args...)
		switch {
		case c.flag == "" && err != nil:
			t.Errorf("ParseFlags(%q): %v", c.args, err)
		case c.flag != "" && (err == nil || !strings.Contains(err.Error(), c.flag)):
			t.Errorf("ParseFlags(%q): %v, want a refusal naming %s", c.args, err, c.flag)
		}
	}
}
