package events

// Streams. A stream prefix has one physical layout, its stream metadata: a
// shard count and a metadata version (1 when the metadata is written, one more
// with every change of the layout), shared by every consumer group of the
// prefix. Stream events carry the prefix and no consumer group in their
// envelope; they enter the prefix's own history index.
//
// Every event that provisions shard streams says which of them the
// coordinator created (CreatedShards): only those are ever deleted by a
// retirement. Streams an operator adopted (stream.adopted) are never deleted.
// Events written before these records existed say nothing: the fold then
// counts every shard such an event provisioned as created, which is what
// those builds did.

// StreamCreated is written when a stream's metadata is written by a create:
// POST /coord/v1/streams/{p} (the shard streams 0..ShardCount-1 were created
// empty, with no consumer group), or the first consumer group of a prefix
// without stream metadata (Group names it; its group.created follows in the
// same batch). The stream is at metadata version 1. CreatedShards lists the
// shard indexes whose streams the coordinator created, or took over as the
// leftovers of a group an earlier build created on this prefix.
type StreamCreated struct {
	ShardCount    int    `msgpack:"shardCount" json:"shardCount"`
	Provisioned   bool   `msgpack:"provisioned" json:"provisioned"`
	RequestedBy   string `msgpack:"requestedBy" json:"requestedBy"`
	Reason        string `msgpack:"reason,omitempty" json:"reason"`
	Group         string `msgpack:"group,omitempty" json:"group,omitempty"`
	CreatedShards []int  `msgpack:"createdShards" json:"createdShards"`
	// Principal and Anonymous are who created it, as GroupCreated's: the
	// stream's shards count against that principal's quota while it has no
	// consumer group.
	Principal string `msgpack:"principal,omitempty" json:"principal,omitempty"`
	Anonymous bool   `msgpack:"anonymous,omitempty" json:"anonymous,omitempty"`
}

// StreamAdopted is written when an operator took over existing shard streams
// 0..ShardCount-1 of a prefix without stream metadata (POST
// /coord/v1/streams/{p}/adopt): nothing was created, and the coordinator never
// deletes them. The stream is at metadata version 1.
type StreamAdopted struct {
	ShardCount  int    `msgpack:"shardCount" json:"shardCount"`
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason,omitempty" json:"reason"`
	// Principal and Anonymous are as in StreamCreated.
	Principal string `msgpack:"principal,omitempty" json:"principal,omitempty"`
	Anonymous bool   `msgpack:"anonymous,omitempty" json:"anonymous,omitempty"`
}

// StreamScaled is written when the layout of a stream without consumer
// groups changed, at once: From to To shards, metadata version
// MetadataVersion. CreatedShards are the new shard streams the coordinator
// created. KeptKeys are the shard streams a scale-in took out of the layout:
// they are left in place, since no consumer group can prove what is on them
// was read (they stay the coordinator's, and a later scale-out uses them
// again).
type StreamScaled struct {
	From            int      `msgpack:"from" json:"from"`
	To              int      `msgpack:"to" json:"to"`
	MetadataVersion int64    `msgpack:"metadataVersion" json:"metadataVersion"`
	RequestedBy     string   `msgpack:"requestedBy" json:"requestedBy"`
	Reason          string   `msgpack:"reason" json:"reason"`
	CreatedShards   []int    `msgpack:"createdShards" json:"createdShards"`
	KeptKeys        []string `msgpack:"keptKeys" json:"keptKeys"`
}

// Stream origins, as the stream's metadata records how it came to be.
const (
	StreamOriginCreated = "CREATED" // POST /coord/v1/streams/{p}
	StreamOriginAdopted = "ADOPTED" // POST /coord/v1/streams/{p}/adopt
	StreamOriginGroup   = "GROUP"   // the first consumer group's create
)

func (StreamCreated) EventType() string { return "stream.created" }
func (StreamAdopted) EventType() string { return "stream.adopted" }
func (StreamScaled) EventType() string  { return "stream.scaled" }

func init() {
	Register("stream.created", func() Event { return &StreamCreated{} })
	Register("stream.adopted", func() Event { return &StreamAdopted{} })
	Register("stream.scaled", func() Event { return &StreamScaled{} })
}
