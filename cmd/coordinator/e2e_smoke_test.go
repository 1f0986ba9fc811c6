package main

import (
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
)

// TestIntegrationWorkedExample replays the contract's worked example (§3.1) over HTTP.
func TestIntegrationWorkedExample(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, nil)
	tc.Do("POST", "/coord/v1/streams/orders/groups/oc", map[string]any{"initialShardCount": 4, "requestedBy": "alice"}).MustStatus(t, 201)

	steps := []struct {
		member       string
		epoch, mv    int64
		owned        []int
		wantEpoch    int64
		wantAssigned []int
		wantPending  []int
	}{
		{"A", 0, 0, nil, 2, []int{0, 1, 2, 3}, nil},
		{"A", 2, 2, []int{0, 1, 2, 3}, 2, []int{0, 1, 2, 3}, nil},
		{"B", 0, 0, nil, 3, nil, []int{2, 3}},
		{"A", 2, 2, []int{0, 1, 2, 3}, 3, []int{0, 1}, nil},
		{"B", 3, 3, nil, 3, nil, []int{2, 3}}, // A still lists 2,3: revoke before assign
		{"A", 3, 3, []int{0, 1}, 3, []int{0, 1}, nil},
		{"B", 3, 3, nil, 3, []int{2, 3}, nil},
	}
	for i, s := range steps {
		got := tc.Heartbeat("orders", "oc", s.member, s.epoch, s.mv, s.owned)
		if got.Status != "OK" || got.MemberEpoch != s.wantEpoch || !equalInts(got.Assigned, s.wantAssigned) || !equalInts(got.Pending, s.wantPending) {
			t.Fatalf("step %d (%s): got %+v, want epoch %d assigned %v pending %v", i, s.member, got, s.wantEpoch, s.wantAssigned, s.wantPending)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
