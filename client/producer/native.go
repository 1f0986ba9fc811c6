package producer

import (
	"context"
	"strings"
)

// Native deduplication (Redis 8.6's idempotent XADD). Where Redis has
// XADD … IDMP, DedupPublishScript writes each new entry with IDMP
// <Config.ProducerID> <event id>, next to its record: the stream's IDMP map
// then refuses a second entry of the id on that stream even where our
// record does not answer (deleted, or evicted under memory pressure). The
// records stay, and are still read first: they are what the check of another shard
// reads (an IDMP map can only be asked by writing to it), what producers on
// the records path read (during an upgrade of the servers, or with
// NoNativeDedup), and they keep the whole window whatever the map's
// IDMP-MAXSIZE (at most 10,000 ids per producer id and stream) lets Redis
// keep. docs/exactly-once.md, "Redis 8.6".

// MaxProducerIDLength bounds Config.ProducerID, in bytes.
const MaxProducerIDLength = 200

// What a producer knows of Redis's idempotent XADD.
const (
	nativeUnknown int32 = iota
	nativeNo
	nativeYes
)

// idmpArg is DedupPublishScript's ARGV[6]: the producer id where Redis has
// the idempotent XADD, else "". The first call (the producer's first
// routing fetch) asks Redis (COMMAND INFO XCFGSET, the command 8.6 added
// with it); a failed probe is tried again by the next publish, which
// meanwhile uses the records path.
func (p *Producer) idmpArg(ctx context.Context) string {
	switch p.native.Load() {
	case nativeYes:
		return p.cfg.ProducerID
	case nativeNo:
		return ""
	}
	if p.cfg.NoNativeDedup {
		p.native.Store(nativeNo)
		return ""
	}
	v, err := p.rdb.Do(ctx, "COMMAND", "INFO", "XCFGSET").Slice()
	if err != nil {
		return ""
	}
	if len(v) != 1 || v[0] == nil {
		p.native.Store(nativeNo)
		return ""
	}
	if p.native.CompareAndSwap(nativeUnknown, nativeYes) {
		p.cfg.Logger.Info("idempotent publish: Redis has the idempotent XADD (IDMP); entries are written with it, next to the records",
			"streamPrefix", p.cfg.StreamPrefix, "producerID", p.cfg.ProducerID)
	}
	return p.cfg.ProducerID
}

// noIDMP reports whether err is Redis refusing XADD … IDMP (a server without
// it, in a cluster upgraded node by node: "Invalid stream ID", it reads IDMP
// as the id) for a call that used producer id pid; the producer then stays
// on the records path. The script ran no write before the refused XADD of
// its first new entry.
func (p *Producer) noIDMP(err error, pid any) bool {
	if s, _ := pid.(string); s == "" || err == nil {
		return false
	}
	// Before 8.6, XADD reads IDMP as the entry id.
	if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "invalid stream id") && !strings.Contains(msg, "syntax error") {
		return false
	}
	if p.native.CompareAndSwap(nativeYes, nativeNo) {
		p.cfg.Logger.Warn("idempotent publish: Redis refused XADD … IDMP; the producer stays on the records path",
			"streamPrefix", p.cfg.StreamPrefix, "error", err)
	}
	return true
}
