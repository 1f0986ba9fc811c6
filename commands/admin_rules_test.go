package commands

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The admin decisions that the coordinator runs after its Redis work
// (stream create and adopt, autoscaling on and off), asserted on what each
// returns: its records and its answer, on a state built from events.

// decideOn runs one decision on w's state and returns its result.
func decideOn[T any](t *testing.T, w *world, decide func(tx *Tx) (T, error)) (Result[T], error) {
	t.Helper()
	now := rulesNow()
	b := NewBatch(w.st, NewRuntimeTable(), now)
	tx := &Tx{B: b, RT: b.RT.Child(now), Rules: testRules(), Meta: events.Meta{Actor: "ops", Time: now}, Now: now, Log: zerolog.Nop()}
	return Decide(tx, decide)
}

func recordTypes(recs []events.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Type)
	}
	return out
}

func TestAdminDecisionsReturnTheirRecords(t *testing.T) {
	prefix := rulesKey.StreamPrefix
	owner := Owner{Principal: "team-a"}
	cases := []struct {
		name   string
		world  func() *world
		decide func(tx *Tx) (any, error)
		err    error
		types  []string
		check  func(t *testing.T, answer any)
	}{
		{name: "create a new stream", world: noGroup,
			decide: func(tx *Tx) (any, error) {
				return CreateStream(tx, CreateStreamInput{StreamPrefix: prefix, RequestedBy: "ops"}, 3, owner, []int{0, 1, 2})
			},
			types: []string{"stream.created"},
			check: func(t *testing.T, a any) {
				v := a.(projection.StreamView)
				if !v.Metadata || v.ShardCount != 3 || v.MetadataVersion != 1 {
					t.Errorf("answer %+v, want metadata, 3 shards, version 1", v)
				}
			}},
		{name: "create where a group uses the prefix", world: func() *world { return group(4) },
			decide: func(tx *Tx) (any, error) {
				return CreateStream(tx, CreateStreamInput{StreamPrefix: prefix, RequestedBy: "ops"}, 3, owner, nil)
			},
			err: ErrPrefixExists},
		{name: "adopt a stream", world: noGroup,
			decide: func(tx *Tx) (any, error) {
				return AdoptStream(tx, AdoptStreamInput{StreamPrefix: prefix, RequestedBy: "ops"}, 2, owner)
			},
			types: []string{"stream.adopted"},
			check: func(t *testing.T, a any) {
				if v := a.(projection.StreamView); !v.Metadata || v.ShardCount != 2 {
					t.Errorf("answer %+v, want metadata and 2 shards", v)
				}
			}},
		{name: "adopt a stream that has metadata", world: func() *world { return streamOnly(2, 0) },
			decide: func(tx *Tx) (any, error) {
				return AdoptStream(tx, AdoptStreamInput{StreamPrefix: prefix, RequestedBy: "ops"}, 2, owner)
			},
			err: ErrPrefixExists},
		{name: "autoscaling on", world: func() *world { return group(4) },
			decide: func(tx *Tx) (any, error) {
				return SetAutoscaling(tx, rulesKey, events.AutoscalingConfigured{Enabled: true, MinShards: 2, MaxShards: 8, RequestedBy: "ops"})
			},
			types: []string{"autoscaling.configured"},
			check: func(t *testing.T, a any) {
				if p := a.(*projection.Autoscaling); !p.Enabled() || p.Policy.MinShards != 2 || p.Policy.MaxShards != 8 {
					t.Errorf("answer %+v, want enabled 2..8", p)
				}
			}},
		{name: "autoscaling on a group that does not exist", world: noGroup,
			decide: func(tx *Tx) (any, error) {
				return SetAutoscaling(tx, rulesKey, events.AutoscalingConfigured{Enabled: true, MinShards: 2, MaxShards: 8})
			},
			err: ErrGroupNotFound},
		{name: "autoscaling off when it is off writes nothing", world: func() *world { return group(4) },
			decide: func(tx *Tx) (any, error) { return DisableAutoscaling(tx, rulesKey, "ops", "") }},
		{name: "autoscaling off when it is on", world: func() *world {
			w := group(4)
			w.apply(&events.AutoscalingConfigured{Enabled: true, MinShards: 2, MaxShards: 8, RequestedBy: "ops"})
			return w
		},
			decide: func(tx *Tx) (any, error) { return DisableAutoscaling(tx, rulesKey, "ops", "") },
			types:  []string{"autoscaling.disabled"},
			check: func(t *testing.T, a any) {
				if p := a.(*projection.Autoscaling); p.Enabled() {
					t.Errorf("answer %+v, want disabled", p)
				}
			}},
		{name: "autoscaling off on a group that does not exist", world: noGroup,
			decide: func(tx *Tx) (any, error) { return DisableAutoscaling(tx, rulesKey, "ops", "") },
			err:    ErrGroupNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := decideOn(t, c.world(), c.decide)
			if c.err != nil {
				if !errors.Is(err, c.err) || res.Records != nil {
					t.Fatalf("got %v and %d records, want %v and none", err, len(res.Records), c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := recordTypes(res.Records); !reflect.DeepEqual(got, c.types) {
				t.Fatalf("records %v, want %v", got, c.types)
			}
			if len(res.Encoded) != len(res.Records) {
				t.Errorf("%d encoded records for %d records", len(res.Encoded), len(res.Records))
			}
			if c.check != nil {
				c.check(t, res.Answer)
			}
		})
	}
}
