package coordinator

import (
	"context"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
)

// IDMPConfigurer sets Redis 8.6's IDMP settings (the map of its idempotent
// XADD: IDMP-DURATION, IDMP-MAXSIZE) on shard streams the coordinator
// created, where they differ and the stream's map is empty, on a server
// that has IDMP (redisstore.Shards). Optional: a Provisioner without it
// configures nothing.
type IDMPConfigurer interface {
	ConfigureIDMP(ctx context.Context, prefix string, shards []int) (set []string, err error)
}

// configureIDMP sets the IDMP settings on prefix's shards, which the
// coordinator created (never a stream it adopted or found: its producers
// chose its settings). Best effort, after the provisioning it follows: a
// stream it could not set keeps the settings it had, and is logged.
func (r *reconciler) configureIDMP(ctx context.Context, prefix string, shards []int) {
	c, ok := r.prov.(IDMPConfigurer)
	if !ok || len(shards) == 0 {
		return
	}
	set, err := c.ConfigureIDMP(ctx, prefix, shards)
	if len(set) > 0 {
		r.logger.Info().Str("prefix", prefix).Strs("streams", set).Msg("IDMP settings set on shard streams")
	}
	if err != nil {
		r.logger.Warn().Err(err).Str("prefix", prefix).Msg("IDMP settings of shard streams")
	}
}

// createdShards are those of shards whose streams the coordinator created:
// st's, and those in created (this provisioning's).
func createdShards(st *projection.Stream, created, shards []int) []int {
	var out []int
	for _, s := range shards {
		if st.Created(s) || commands.ContainsInt(created, s) {
			out = append(out, s)
		}
	}
	return out
}
