package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
)

func ExampleProducer_Publish() {
	ctx := context.Background()
	p, err := producer.New(producer.Config{
		// Producer routing needs the READ role.
		Coordinator:   client.New("http://127.0.0.1:8080", client.BasicAuth{Username: "app", Password: "secret"}),
		Redis:         redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}),
		StreamPrefix:  "orders",
		ConsumerGroup: "billing",
		EventIDField:  "eventId", // lets consumers deduplicate retries
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Publish(ctx, "customer-42", map[string]any{"type": "order.created", "amount": "12.50"})
	switch {
	case errors.Is(err, producer.ErrNoShards):
		log.Print("the group is scaled to zero")
	case err != nil:
		log.Print(err)
	default:
		fmt.Println("written to", res.StreamKey, "as", res.ID, "event", res.EventID)
	}
}

func ExampleProducer_PublishBatch() {
	ctx := context.Background()
	p, err := producer.New(producer.Config{
		Coordinator:  client.New("http://127.0.0.1:8080", client.BearerToken("token from /coord/v1/auth/login")),
		Redis:        redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}),
		StreamPrefix: "orders", ConsumerGroup: "billing",
	})
	if err != nil {
		log.Fatal(err)
	}
	batch := []producer.Message{
		{PartitionKey: "customer-1", Fields: map[string]any{"n": "1"}},
		{PartitionKey: "customer-2", Fields: map[string]any{"n": "2"}},
	}
	results, err := p.PublishBatch(ctx, batch)
	if err != nil {
		for i, r := range results {
			if r.Err != nil {
				log.Printf("message %d: %v", i, r.Err)
			}
		}
	}
}
