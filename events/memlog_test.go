package events_test

import (
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/events/eventstest"
)

func TestMemLogAcceptance(t *testing.T) {
	eventstest.RunLogSuite(t, func(t *testing.T) events.Log { return events.NewMemLog() })
}
