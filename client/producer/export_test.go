package producer

// AssumeNativeDedup makes p believe Redis has the idempotent XADD, as a
// producer that probed a node of a Cluster upgraded node by node would
// (tests only).
func AssumeNativeDedup(p *Producer) { p.native.Store(nativeYes) }
