package wire

// Held heartbeats (our addition; the reference's clients never send the
// header and see no change). A member asks with HeaderHold, the longest it
// may wait for news in milliseconds; the coordinator holds the heartbeat
// while its answer would tell the member nothing new, and says how it ended
// in HeaderHoldOutcome, one of the Hold* words.
const (
	HeaderHold        = "X-Rsc-Hold-Ms"
	HeaderHoldOutcome = "X-Rsc-Hold"
)

// How a heartbeat that asked to be held was answered (HeaderHoldOutcome).
const (
	// HoldAnswered: not held: the answer brings news, or the heartbeat
	// reported something to decide.
	HoldAnswered = "answered"
	// HoldWoken: held, then answered when a change concerned the answer.
	HoldWoken = "woken"
	// HoldElapsed: held for the whole bound, then answered as a heartbeat
	// sent at that moment.
	HoldElapsed = "elapsed"
	// HoldLimit: not held: as many heartbeats are held as allowed.
	HoldLimit = "limit"
	// HoldReleased: held, and answered at once with the answer it was held
	// with (shutdown, loss of leadership, a newer heartbeat of the member).
	HoldReleased = "released"
	// HoldOff: not held: the coordinator holds no heartbeat.
	HoldOff = "off"
)
