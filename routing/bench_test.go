package routing_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rscoord/rsc/routing"
)

var sinkShard int

func BenchmarkRouteKey(b *testing.B) {
	cases := []struct {
		key        string
		shardCount int
	}{
		{"order-123", 12},
		{"customer-00001", 1000},
		{strings.Repeat("x", 64), 12},
		{"k1", 1431655766}, // takes the re-hash path
	}
	for _, c := range cases {
		name := fmt.Sprintf("len=%d/n=%d", len(c.key), c.shardCount)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.key)))
			for b.Loop() {
				s, err := routing.RouteKey(c.key, c.shardCount)
				if err != nil {
					b.Fatal(err)
				}
				sinkShard = s
			}
		})
	}
}

func BenchmarkSlot(b *testing.B) {
	key := routing.StreamKey("create-order", 7)
	b.ReportAllocs()
	for b.Loop() {
		sinkShard = routing.Slot(key)
	}
}
