package projection

import (
	"github.com/rscoord/rsc/events"
)

// Records of no group: the coordinator's and the log's own (log.restored is
// folded by State.apply itself), and a stream's, which the stream fold folds
// (applystream.go).

func init() {
	registerNoFold(&events.TermStarted{}, &events.LogRepaired{}, &events.LogRestored{},
		&events.StreamCreated{}, &events.StreamAdopted{}, &events.StreamScaled{})
}
