package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// TestQuarantinedPrefixIsNeverWritten: the writer refuses every decision
// that would append to a quarantined prefix (a create on it, here, called
// without the HTTP layer's gate), with COORDINATOR_METADATA_CORRUPT naming
// the entry, and decides for every other prefix; the quarantine came in
// with an entry another writer appended (a newer build's), folded on
// catch-up.
func TestQuarantinedPrefixIsNeverWritten(t *testing.T) {
	ctx := context.Background()
	log := events.NewMemLog()
	c := startOn(t, log, nil)
	mustCreate(t, c, "a")
	payload, _ := msgpack.Marshal(map[string]any{"to": "mars"})
	data, _ := msgpack.Marshal(map[string]any{"type": "group.teleported", "v": 1, "prefix": "p", "group": "a", "time": time.Now().UnixNano(), "payload": msgpack.RawMessage(payload)})
	last, _ := log.LastID(ctx)
	ids, err := log.Append(ctx, last, [][]byte{data})
	if err != nil {
		t.Fatal(err)
	}
	// The next create conflicts with the foreign entry, catches up and folds
	// it (its plan, made before, may be answered as a conflict to retry);
	// then it is refused.
	err = create(c, "b")
	if errors.Is(err, commands.ErrStateConflict) {
		err = create(c, "b")
	}
	if !errors.Is(err, commands.ErrMetadataCorrupt) || !strings.Contains(err.Error(), ids[0]) {
		t.Fatalf("create on the quarantined prefix: %v, want COORDINATOR_METADATA_CORRUPT naming %s", err, ids[0])
	}
	if err := c.Quarantined("p"); !errors.Is(err, commands.ErrMetadataCorrupt) {
		t.Errorf("Quarantined(p) = %v", err)
	}
	if err := c.Quarantined("q"); err != nil {
		t.Errorf("Quarantined(q) = %v", err)
	}
	n := 2
	if _, err := c.CreateGroup(ctx, events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: "q", ConsumerGroup: "a", InitialShardCount: &n, RequestedBy: "t"}); err != nil {
		t.Fatalf("create on another prefix: %v", err)
	}
	after, _ := log.LastID(ctx)
	entries, _ := log.Read(ctx, ids[0], 0)
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err == nil && rec.StreamPrefix == "p" {
			t.Errorf("entry %s of the quarantined prefix was appended (%s)", e.ID, rec.Type)
		}
	}
	if _, ok := c.State().Group(projection.GroupKey{StreamPrefix: "q", ConsumerGroup: "a"}); !ok || c.State().LastID() != after {
		t.Errorf("the other prefix's create is not in the state at %s", after)
	}
}
