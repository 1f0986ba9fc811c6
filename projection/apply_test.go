package projection

import (
	"testing"

	"github.com/rscoord/rsc/events"
)

// TestEveryEventTypeHasAFold: an event type registered in events without a
// fold registered here (register, in the apply file of its subject) would
// fold as an audit record, silently. Registering one twice panics at init.
func TestEveryEventTypeHasAFold(t *testing.T) {
	for _, name := range events.Types() {
		if _, ok := groupFolds[name]; !ok {
			t.Errorf("event type %q has no fold: register it in the projection's apply file of its subject", name)
		}
	}
	for name := range groupFolds {
		if _, ok := events.New(name); !ok {
			t.Errorf("fold registered for %q, which events does not know", name)
		}
	}
}

func TestRegisterFoldRefusesADuplicate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a second fold of member.joined was registered")
		}
	}()
	register(memberJoined)
}
