package events_test

import (
	"reflect"
	"testing"

	"github.com/rscoord/rsc/events"
)

// TestReshardingSteps: the events of a resharding's lifecycle, and only
// those, name their resharding (replay follows a resharding by them).
func TestReshardingSteps(t *testing.T) {
	var got []string
	for _, name := range events.Types() {
		ev, _ := events.New(name)
		if s, ok := ev.(events.ReshardingStep); ok {
			reflect.ValueOf(ev).Elem().FieldByName("ReshardingID").SetString("r-1")
			if s.Resharding() != "r-1" {
				t.Errorf("%s names resharding %q, want its ReshardingID", name, s.Resharding())
			}
			got = append(got, name)
		}
	}
	want := []string{"resharding.activated", "resharding.completed", "resharding.drained", "resharding.draining", "resharding.preparing",
		"resharding.provisioned", "resharding.reopened", "resharding.retired", "resharding.rolled_back"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resharding steps %q, want %q", got, want)
	}
}
