package member_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
)

func ExampleListen() {
	// Stop on SIGTERM: in-flight messages finish and are acked, then every
	// logical member leaves the group.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := member.Config{
		// Heartbeats need a user with the MEMBER role.
		Coordinator:   client.New("http://127.0.0.1:8080", client.BasicAuth{Username: "billing-worker", Password: "secret"}),
		Redis:         redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", PoolSize: 32}),
		StreamPrefix:  "orders",
		ConsumerGroup: "billing",
		Concurrency:   4, // logical members <base>-m0 .. <base>-m3
	}
	err := member.Listen(ctx, cfg, func(ctx context.Context, m member.Message) error {
		log.Printf("%s %s: %v", m.StreamKey, m.ID, m.Values)
		return nil // ack; an error leaves the message pending for a retry
	})
	if err != nil {
		log.Fatal(err)
	}
}
