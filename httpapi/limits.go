package httpapi

import (
	"time"

	"github.com/rscoord/rsc/httpapi/guard"
)

// Every bound the HTTP transport puts on a caller, in one place. A caller that
// can reach the port is not trusted to be kind: each request has a size, a time
// and a cost it cannot exceed, and an answer never shows more than it must.

// Request size.
const (
	// MaxBodyBytes bounds every request body (413 beyond).
	MaxBodyBytes = 1 << 20
	// MaxHeaderBytes bounds the request line and headers together (431 beyond).
	// net/http enforces it with a few KiB of slack; the server's first
	// middleware (Server.bounded) enforces it exactly.
	MaxHeaderBytes = 32 << 10
	// MaxTraceHeaderBytes bounds X-Request-Id, X-Correlation-Id and
	// X-Amzn-Trace-Id, which end up in the audit log (400 beyond).
	MaxTraceHeaderBytes = 128
)

// Server timeouts: a client that trickles its headers or body, or never reads
// its answer, holds a connection for at most this long.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second  // headers and body
	WriteTimeout      = 60 * time.Second  // from the end of the headers to the end of the answer
	IdleTimeout       = 120 * time.Second // keep-alive between requests
)

// MaxHeartbeatHold is the longest a heartbeat may be held (the
// coordinator's --max-heartbeat-hold at most): its answer, decided again at
// the hold's end, must be written within WriteTimeout.
const MaxHeartbeatHold = WriteTimeout - 10*time.Second

// Forwarding to the leader (--ha): a leader that does not accept, handshake or
// answer in time fails the request with 503 and Retry-After instead of holding
// the follower's goroutine and the caller's connection.
// (guard/forward.go has the details).
const (
	ForwardDialTimeout           = guard.ForwardDialTimeout
	ForwardTLSHandshakeTimeout   = guard.ForwardTLSHandshakeTimeout
	ForwardResponseHeaderTimeout = guard.ForwardResponseHeaderTimeout
	ForwardCatchUpWait           = guard.ForwardCatchUpWait
)

// Expensive reads.
const (
	// MaxEntriesPerRequest bounds the shard stream entries one messages request
	// reads from Redis, look-ahead entries included, over all the shards it
	// reads: a merged page over N shards reads at most MaxEntriesPerRequest/N
	// entries per shard (and so has at most that many rows less one), and a
	// tail page that would need more is refused.
	MaxEntriesPerRequest = 2000
	// MaxConcurrentReplays bounds the replays (a fold of the log) running at
	// once; more answer 429 with Retry-After: 1.
	MaxConcurrentReplays = 2
	// MaxConcurrentMessageReads bounds the messages pages (the monitoring
	// route's and Grafana's) read and answered at once: one holds a few times
	// MaxMessagesAnswerBytes while it reads and encodes, so without a bound
	// the coordinator's memory grew with the requests in flight (32 at once
	// over entries of 1 MiB: 0.8 GB). More answer 429 with Retry-After: 1.
	MaxConcurrentMessageReads = 4
)

// Bytes of messages answers. Entries are read from Redis one at a time
// inside a script (redisstore's messagesScript), each cut to MaxRecordBytes
// of id, field names and values, and the read stops once the entries hold
// the answer's budget: neither Redis's reply nor the coordinator's memory
// ever holds much more than MaxMessagesAnswerBytes, whatever the entries'
// size. The page then ends where its JSON reaches MaxMessagesAnswerBytes
// (at least one record), says so (truncated), and its cursor goes on from
// its last record. A merged Grafana page splits the budget between its shards.
const (
	// MaxMessagesAnswerBytes bounds the JSON body of one messages answer.
	MaxMessagesAnswerBytes = 8 << 20
	// MaxRecordBytes bounds one record's id, field names and values; longer
	// ones are cut (fieldsTruncated). Its JSON, escapes and the payload's
	// copy included, stays well under MaxMessagesAnswerBytes.
	MaxRecordBytes = 256 << 10
	// answerEnvelopeBytes is what a page holds besides its records (names,
	// cursor, direction): reserved out of the budget.
	answerEnvelopeBytes = 4 << 10
)

// Failed logins are throttled by token buckets: guard/throttle.go has the
// numbers.
