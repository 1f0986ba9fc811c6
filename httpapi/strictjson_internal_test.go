package httpapi

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rscoord/rsc/wire"
)

// TestCheckKeys: keys that a case-insensitive, last-one-wins decoder would
// read differently from the contract are refused, naming the key; unknown
// keys and malformed documents are left alone.
func TestCheckKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		into any
		body string
		want string // "" when accepted
	}{
		{"exact keys", &wire.ScaleRequest{}, `{"targetShardCount":3,"requestedBy":"ops"}`, ""},
		{"unknown key ignored", &wire.ScaleRequest{}, `{"targetShardCount":3,"colour":"blue"}`, ""},
		{"unknown keys differing by case", &wire.ScaleRequest{}, `{"colour":1,"Colour":2}`, ""},
		{"case variant after the key", &wire.ScaleRequest{}, `{"targetShardCount":3,"TARGETSHARDCOUNT":5}`,
			`key "TARGETSHARDCOUNT" differs from "targetShardCount" only by case`},
		{"case variant alone", &wire.ScaleRequest{}, `{"TargetShardCount":5}`,
			`key "TargetShardCount" differs from "targetShardCount" only by case`},
		{"duplicate key", &wire.ScaleRequest{}, `{"targetShardCount":3,"targetShardCount":5}`, `duplicate key "targetShardCount"`},
		{"duplicate unknown key", &wire.ScaleRequest{}, `{"colour":1,"colour":2}`, `duplicate key "colour"`},
		{"nested object", &wire.HeartbeatRequest{}, `{"runtimeConsumerCapacity":{"availableConcurrency":1,"AvailableConcurrency":2}}`,
			`key "runtimeConsumerCapacity.AvailableConcurrency" differs from "availableConcurrency" only by case`},
		{"object in an array", &wire.HeartbeatRequest{}, `{"ownedShards":[{"shardIndex":1},{"shardIndex":2,"shardIndex":3}]}`,
			`duplicate key "ownedShards[1].shardIndex"`},
		{"deeper", &wire.HeartbeatRequest{}, `{"revokingShards":[{"shard":{"SHARDINDEX":1},"state":"REVOKED"}]}`,
			`key "revokingShards[0].shard.SHARDINDEX" differs from "shardIndex" only by case`},
		{"duplicate inside an unknown key", &wire.ScaleRequest{}, `{"extra":{"a":1,"a":2}}`, `duplicate key "extra.a"`},
		{"case variant inside an unknown key is unknown", &wire.ScaleRequest{}, `{"extra":{"targetShardCount":1,"TargetShardCount":2}}`, ""},
		{"malformed is json.Unmarshal's to report", &wire.ScaleRequest{}, `{"targetShardCount":`, ""},
		{"not an object", &wire.ScaleRequest{}, `[1,2]`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkKeys([]byte(c.body), c.into)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("checkKeys(%s) = %v, want nil", c.body, err)
			case c.want != "" && (err == nil || err.Error() != c.want):
				t.Fatalf("checkKeys(%s) = %v, want %q", c.body, err, c.want)
			}
		})
	}
}

// TestCheckKeysCoversEveryRequestBody: every body a handler decodes has its
// contract keys known to checkKeys (a struct it cannot see into would let
// case variants through).
func TestCheckKeysCoversEveryRequestBody(t *testing.T) {
	for _, v := range []any{&wire.CreateRequest{}, &wire.ScaleRequest{}, &wire.DeleteRequest{}, &wire.OrderingRequest{},
		&wire.RollbackRequest{}, &wire.AutoscalingRequest{}, &wire.AutoscalingDeleteRequest{}, &wire.LoginRequest{}, &wire.HeartbeatRequest{}} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]any
		if err := json.Unmarshal(data, &keys); err != nil {
			t.Fatal(err)
		}
		fields, _ := structKeys(deref(typeOf(v)))
		for k := range keys {
			if _, ok := fields[k]; !ok {
				t.Errorf("%T: key %q of its encoding is not among checkKeys' %v", v, k, fields)
			}
		}
		if len(keys) == 0 {
			t.Errorf("%T has no keys", v)
		}
	}
}

func typeOf(v any) reflect.Type { return reflect.TypeOf(v) }
