// Package streamread holds what a monitoring read of a shard stream asks
// for. The coordinator's HTTP API (httpapi.StreamReader) asks it and
// redisstore answers it (Shards.Messages); neither imports the other, so the
// query lives here, with no dependencies.
package streamread

// MessagesQuery is one page of a shard stream, bounded in entries and in
// bytes.
type MessagesQuery struct {
	Forward bool
	Cursor  string // exclusive; "" from the start of the direction
	Limit   int
	// Peek reads one entry more than Limit to tell whether more follow.
	Peek bool
	// MaxBytes stops the read once the entries read hold this many bytes of
	// ids, field names and values (after MaxRecordBytes' cuts); the first
	// entry is always read.
	MaxBytes int
	// MaxRecordBytes cuts each entry's field names and values, in order, so
	// that the entry holds at most this many bytes with its id (it is then
	// fieldsTruncated); the fields that no longer fit are dropped. 0 reads
	// ids only.
	MaxRecordBytes int
}
