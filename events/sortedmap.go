package events

import (
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// msgpack's SetSortMapKeys only sorts a few map types; maps inside events and
// snapshots use these helpers so that equal values always give equal bytes.

// EncodeSortedMap writes m with its keys in increasing order.
func EncodeSortedMap[V any](enc *msgpack.Encoder, m map[string]V) error {
	if m == nil {
		return enc.EncodeNil()
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := enc.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

// Targets is a target assignment: member id to shard indexes.
type Targets map[string][]int

// EncodeMsgpack encodes with sorted member ids.
func (t Targets) EncodeMsgpack(enc *msgpack.Encoder) error { return EncodeSortedMap(enc, t) }
