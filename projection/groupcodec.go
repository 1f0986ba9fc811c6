package projection

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// groupFields is a Group without its methods: what msgpack encodes of it by
// reflection, every exported field (members and targets are not).
type groupFields Group

// groupHeadFields is how many of a group's encoded fields come before its
// members and targets: Key to MetadataVersion, none of them omitted when
// empty.
const groupHeadFields = 6

// groupMaps are a group's members and targets as snapshots hold them.
type groupMaps struct {
	Members MemberMap      `msgpack:"members"`
	Targets events.Targets `msgpack:"targets"`
}

// EncodeMsgpack encodes the group as a map of its fields in declaration order,
// members and targets after MetadataVersion, where they stood when they were
// exported fields: a snapshot (and a state's digest) keeps its bytes. A
// layered group is encoded as its flat copy.
func (g *Group) EncodeMsgpack(enc *msgpack.Encoder) error {
	if g.lay != nil {
		g = deepCopy(g)
	}
	raw, err := events.Marshal((*groupFields)(g))
	if err != nil {
		return err
	}
	r := bytes.NewReader(raw)
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	start := len(raw) - r.Len()
	for range 2 * groupHeadFields {
		if err := dec.Skip(); err != nil {
			return err
		}
	}
	cut := len(raw) - r.Len()
	if err := enc.EncodeMapLen(n + 2); err != nil {
		return err
	}
	w := enc.Writer()
	if _, err := w.Write(raw[start:cut]); err != nil {
		return err
	}
	for _, f := range [...]struct {
		name string
		v    any
	}{{"members", g.members}, {"targets", g.targets}} {
		if err := enc.EncodeString(f.name); err != nil {
			return err
		}
		if err := enc.Encode(f.v); err != nil {
			return err
		}
	}
	_, err = w.Write(raw[cut:])
	return err
}

// DecodeMsgpack decodes what EncodeMsgpack encodes (and what builds before it
// wrote, the same map).
func (g *Group) DecodeMsgpack(dec *msgpack.Decoder) error {
	var w struct {
		groupFields `msgpack:",inline"`
		groupMaps   `msgpack:",inline"`
	}
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*g = Group(w.groupFields)
	g.members, g.targets = w.Members, w.Targets
	return nil
}
