package coordinator_test

import (
	"testing"

	"github.com/rscoord/rsc/events"
)

// decoded decodes log entries into records; an entry that does not decode
// fails the test.
func decoded(t testing.TB, entries []events.Entry) []events.Record {
	t.Helper()
	out := make([]events.Record, 0, len(entries))
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// typesOf lists the records' types, in order.
func typesOf(recs []events.Record) []string {
	out := make([]string, len(recs))
	for i, rec := range recs {
		out[i] = rec.Type
	}
	return out
}
