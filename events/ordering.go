package events

// Ordered resharding. A group created with ordering KEY keeps per-key order
// across reshardings: before the new shard count becomes visible to producers,
// the coordinator raises a fence on every shard whose keys move (producers
// that fence their publishes with an older routing version are refused), and
// records where each shard stood (its cutover id). Entries published after the
// cutover on a shard that gains keys are held back (a barrier) until Redis
// proves every entry published before the cutover on the shards those keys
// came from was acknowledged.

// Ordering values.
const (
	OrderingKey  = "KEY"
	OrderingNone = "NONE"
)

// GroupOrderingChanged is written when an operator switches a group's
// ordering (only while no resharding is active).
type GroupOrderingChanged struct {
	Ordering    string `msgpack:"ordering" json:"ordering"`
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason" json:"reason"`
}

// ShardCutover is where one shard of the layout before a change stood when its
// fence was raised: the stream's last id then ("0-0" for an empty or missing
// stream). Fenced reports whether its keys move (producers with an older
// routing version are refused on it).
type ShardCutover struct {
	ShardIndex int    `msgpack:"shardIndex" json:"shardIndex"`
	StreamKey  string `msgpack:"streamKey" json:"streamKey"`
	LastID     string `msgpack:"lastId" json:"lastId"`
	Fenced     bool   `msgpack:"fenced" json:"fenced"`
}

// CutoverBarrier is one shard of the layout after a change whose entries
// after After must wait until the Sources (shard indexes of the layout
// before, each with its cutover in the event's Shards) are proven read up to
// their cutover. After is the shard's own cutover ("0-0" for a new shard).
type CutoverBarrier struct {
	ShardIndex int    `msgpack:"shardIndex" json:"shardIndex"`
	After      string `msgpack:"after" json:"after"`
	Sources    []int  `msgpack:"sources" json:"sources"`
}

// ReshardingCutover is written, for a group with ordering KEY, right before the
// shard layout changes (an activation, or a rollback after one): fences of the
// shards that lose keys were raised to Fence (the metadata version the change
// takes the group to), FromCount shards stood at Shards, ToCount is the
// layout after the change, and Barriers are the shards that wait.
type ReshardingCutover struct {
	ReshardingID string           `msgpack:"reshardingId" json:"reshardingId"`
	Fence        int64            `msgpack:"fence" json:"fence"`
	FromCount    int              `msgpack:"fromCount" json:"fromCount"`
	ToCount      int              `msgpack:"toCount" json:"toCount"`
	Shards       []ShardCutover   `msgpack:"shards" json:"shards"`
	Barriers     []CutoverBarrier `msgpack:"barriers" json:"barriers"`
	// StreamFence is the stream's metadata version the change takes the
	// stream to (0: the prefix has no stream metadata): the same shards
	// were fenced to it under the stream's own field of the fence hash
	// (routing.StreamFenceField), for producers that route by stream.
	StreamFence int64 `msgpack:"streamFence,omitempty" json:"streamFence,omitempty"`
}

// BarrierProof is what Redis showed of one source shard of a barrier: whether
// the stream exists, the group's last delivered id ("" without the group) and
// how many entries up to the cutover were pending (counted up to 100). It
// proves the source when the stream is gone, or the last delivered id is at
// or past the cutover with nothing pending (projection.SourceProven).
type BarrierProof struct {
	ShardIndex    int    `msgpack:"shardIndex" json:"shardIndex"`
	StreamKey     string `msgpack:"streamKey" json:"streamKey"`
	CutoverID     string `msgpack:"cutoverId" json:"cutoverId"`
	LastDelivered string `msgpack:"lastDelivered" json:"lastDelivered"`
	Exists        bool   `msgpack:"exists" json:"exists"`
	Pending       int64  `msgpack:"pending" json:"pending"`
	// LastGenerated is the stream's last generated id: below CutoverID only
	// when the stream was recreated after the cutover (ids never go back in
	// a stream's life), and what it held up to the cutover is gone.
	LastGenerated string `msgpack:"lastGenerated,omitempty" json:"lastGenerated,omitempty"`
}

// BarrierReleased is written when Redis proved, for every source shard of the
// listed target shards, that the entries published before the cutover were
// acknowledged: members may process the entries they held back on them.
type BarrierReleased struct {
	ReshardingID string         `msgpack:"reshardingId" json:"reshardingId"`
	Fence        int64          `msgpack:"fence" json:"fence"`
	Shards       []int          `msgpack:"shards" json:"shards"`
	Evidence     []BarrierProof `msgpack:"evidence" json:"evidence"`
}

// ShardWrites counts entries that landed on a fenced shard after its cutover
// without a fence check (a producer that does not fence its publishes).
type ShardWrites struct {
	ShardIndex int    `msgpack:"shardIndex" json:"shardIndex"`
	StreamKey  string `msgpack:"streamKey" json:"streamKey"`
	Count      int64  `msgpack:"count" json:"count"`
	FirstID    string `msgpack:"firstId" json:"firstId"`
}

// UnfencedWrites is written when entries landed on fenced shards after their
// cutover without a fence check: the ordering guarantee does not cover them.
type UnfencedWrites struct {
	ReshardingID string        `msgpack:"reshardingId" json:"reshardingId"`
	Fence        int64         `msgpack:"fence" json:"fence"`
	Shards       []ShardWrites `msgpack:"shards" json:"shards"`
}

// Evidence the reconciler reads from Redis for ordered reshardings (not
// events; the events above carry what decisions made of it).

// CutoverShard asks for one shard's cutover: Raise its fence (its keys move)
// or only read where it stands.
type CutoverShard struct {
	Index int
	Raise bool
}

// CutoverRead is where one shard stood when its fence was raised, and Done
// when the group had already read and acknowledged everything up to there
// (then nothing has to wait for it).
type CutoverRead struct {
	ShardCutover
	Done bool
}

// BarrierSource is one source shard of a barrier to prove, and where the scan
// for unfenced entries after its cutover stands (ScanFrom "" starts at the
// cutover; Scan is how many entries to scan, 0 for none).
type BarrierSource struct {
	ShardIndex int
	StreamKey  string
	CutoverID  string
	ScanFrom   string
	Scan       int
}

// BarrierRead is what Redis shows of one source shard: the proof, and the
// unfenced entries found after the cutover by this read's scan (how many,
// the first), with where the next scan starts.
type BarrierRead struct {
	BarrierProof
	Unfenced      int64
	FirstUnfenced string
	ScannedTo     string
}

func (GroupOrderingChanged) EventType() string { return "group.ordering_changed" }
func (ReshardingCutover) EventType() string    { return "resharding.cutover" }
func (BarrierReleased) EventType() string      { return "resharding.barrier_released" }
func (UnfencedWrites) EventType() string       { return "resharding.unfenced_writes" }

func init() {
	Register("group.ordering_changed", func() Event { return &GroupOrderingChanged{} })
	Register("resharding.cutover", func() Event { return &ReshardingCutover{} })
	Register("resharding.barrier_released", func() Event { return &BarrierReleased{} })
	Register("resharding.unfenced_writes", func() Event { return &UnfencedWrites{} })
}
