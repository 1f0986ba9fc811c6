package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rscoord/rsc/wire"
)

// refCheckKeys is the first checkKeys, on encoding/json's tokenizer: slower
// (it allocates per token), plainly right, and kept as the reference the
// byte scanner is compared against (FuzzCheckKeysMatchesReference).
func refCheckKeys(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := refWalkValue(dec, reflect.TypeOf(v), "")
	var ke *errJSONKey
	if errors.As(err, &ke) {
		return ke
	}
	return nil
}

func refWalkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	t = deref(t)
	switch tok {
	case json.Delim('{'):
		return refWalkObject(dec, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := refWalkValue(dec, elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func refWalkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	var folded map[string]string
	var elem reflect.Type
	switch {
	case t == nil:
	case t.Kind() == reflect.Struct && !customDecoder(t):
		fields, folded = structKeys(t)
	case t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		where := key
		if path != "" {
			where = path + "." + key
		}
		if seen[key] {
			return &errJSONKey{"duplicate key " + strconv.Quote(where)}
		}
		seen[key] = true
		next := elem
		if fields != nil {
			ft, exact := fields[key]
			if !exact {
				if want, ok := folded[strings.ToLower(key)]; ok {
					return &errJSONKey{fmt.Sprintf("key %s differs from %s only by case", strconv.Quote(where), strconv.Quote(want))}
				}
			}
			next = ft
		}
		if err := refWalkValue(dec, next, where); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// checkKeysBodies are the seeds of the differential test and the bodies of
// the benchmark.
var checkKeysBodies = []string{
	`{"memberId":"m-1","memberName":"w","metadataVersion":7,"memberEpoch":3,"ownedShards":[0,1,2,3],"revokingShards":[],` +
		`"runtimeConsumerCapacity":{"availableConcurrency":4},"requestedBy":"svc"}`,
	`{"targetShardCount":3,"TARGETSHARDCOUNT":5}`,
	`{"targetShardCount":3,"targetShardCount":5}`,
	`{"\u0074argetShardCount":3,"targetShardCount":5}`,
	`{"t\u0041rgetShardCount":3}`,
	`{"ownedShards":[{"shardIndex":1},{"shardIndex":2,"shardIndex":3}]}`,
	`{"revokingShards":[{"shard":{"SHARDINDEX":1},"state":"REVOKED"}]}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"q":18}`,
	`{"extra":{"a":[{"b":{"c":1,"c":2}}]}}`,
	` { "x" : [ 1 , -2.5e3 , true , null , "s\"q" ] , "y" : {} } `,
	`[[[[{"a":1,"a":2}]]]]`,
	`{"requestedBy":"\u00e9","reason":"tab\tin"}`,
	`"just a string"`,
	`{}`,
	`[]`,
	"{\"\xf4000\":[{},{\"\":0,\"\":0}]}", // bad UTF-8 in a key reads as U+FFFD
	`{"":{"":[{"":{"":0,"":0}}]}}`,       // empty keys in the path
}

// FuzzCheckKeysMatchesReference: on every valid JSON document, the byte
// scanner refuses exactly what the tokenizer-based reference refuses, with
// the same message, for the request bodies the handlers decode.
func FuzzCheckKeysMatchesReference(f *testing.F) {
	for _, b := range checkKeysBodies {
		f.Add([]byte(b))
	}
	into := []any{&wire.HeartbeatRequest{}, &wire.ScaleRequest{}, &wire.CreateRequest{}, &wire.AutoscalingRequest{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			for _, v := range into {
				_ = checkKeys(data, v) // must not panic; json.Unmarshal refuses the body anyway
			}
			return
		}
		for _, v := range into {
			got, want := checkKeys(data, v), refCheckKeys(data, v)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("checkKeys(%q, %T) = %v, the reference says %v", data, v, got, want)
			}
		}
	})
}

// TestCheckKeysDeepNesting: nesting deeper than encoding/json's limit stops
// the scan (json.Unmarshal refuses it) instead of recursing without bound.
func TestCheckKeysDeepNesting(t *testing.T) {
	deep := []byte(strings.Repeat("[", 200000) + strings.Repeat("]", 200000))
	if err := checkKeys(deep, &wire.HeartbeatRequest{}); err != nil {
		t.Fatalf("checkKeys of deep nesting = %v, want nil (a syntax error is json.Unmarshal's)", err)
	}
	if json.Unmarshal(deep, &wire.HeartbeatRequest{}) == nil {
		t.Fatal("json.Unmarshal accepted the deep nesting")
	}
}

// BenchmarkCheckKeys: the byte scanner against the reference on a steady
// heartbeat's body (every heartbeat goes through it).
func BenchmarkCheckKeys(b *testing.B) {
	body := []byte(checkKeysBodies[0])
	for _, c := range []struct {
		name  string
		check func([]byte, any) error
	}{{"scanner", checkKeys}, {"reference", refCheckKeys}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.check(body, &wire.HeartbeatRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
