package coordinator

import (
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
)

// committedState is the committed state (the projection and the runtime
// table) as a decision would see it, read without the writer.
type committedState struct {
	state  *projection.State
	table  *commands.RuntimeTable
	rules  commands.Rules
	now    func() time.Time
	timers func() time.Time
	logger zerolog.Logger
}

// peek runs a read-only check against the committed state, as a decision
// would see it, without the writer: a command refused by the state it would
// find is refused before anything touches Redis. The decision checks again.
func (c committedState) peek(check func(t *commands.Tx) error) error {
	var err error
	c.state.Read(func(projection.Reader) {
		now := c.now()
		b := commands.NewBatch(c.state, c.table, c.timers())
		err = check(&commands.Tx{B: b, RT: b.RT, Rules: c.rules, Now: now, Log: c.logger})
	})
	return err
}
