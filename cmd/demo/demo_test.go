package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	// The demo starts its member process by running its own executable again.
	if os.Getenv(roleEnv) == "member" {
		os.Exit(runMember())
	}
	os.Exit(m.Run())
}

// The demo is what `make demo` runs; it must pass on its own.
func TestIntegrationDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs redis-server, the coordinator and a member process")
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"--coordinator-bin", "", "--replay-bin", "", "--rate", "300"}, &out, &out)
	t.Log(out.String())
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	for _, want := range []string{"scale {\"targetShardCount\":8}", "scale {\"targetShardCount\":3}", "DEPRECATED/done", "nothing pending", "SCALE_IN 8 -> 3", "RESULT: PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

// make demo-ordered: the ordered group shows no inversion and loses nothing
// (the demo fails otherwise); the plain group's count is printed beside it.
func TestIntegrationDemoOrdered(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs redis-server, the coordinator and two member processes")
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"--coordinator-bin", "", "--replay-bin", "", "--ordered"}, &out, &out)
	t.Log(out.String())
	if code != 0 {
		t.Fatalf("demo --ordered exited %d", code)
	}
	for _, want := range []string{`"ordering":"KEY"`, "holds back", "inversions", "ordered group: every key's messages handled in the order they were published", "RESULT: PASS — ordered group:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`ordered  KEY +\d+ +\d+ +0 +\d+ +0\n`).MatchString(out.String()) {
		t.Errorf("the result table does not show the ordered group with 0 lost and 0 inversions")
	}
}

// make demo-exactly-once: the producers with DedupWindow write no event id
// twice and lose none (the demo fails otherwise); the others' count is
// printed beside them.
func TestIntegrationDemoExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs redis-server and the coordinator")
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"--coordinator-bin", "", "--replay-bin", "", "--exactly-once"}, &out, &out)
	t.Log(out.String())
	if code != 0 {
		t.Fatalf("demo --exactly-once exited %d", code)
	}
	if !regexp.MustCompile(`DedupWindow 10m: +\d+ events acknowledged, \d+ replies lost, .* → 0 event ids written twice or more \(0 extra entries\), 0 missing`).MatchString(out.String()) {
		t.Errorf("the result does not show 0 duplicates and 0 missing with DedupWindow")
	}
	for _, want := range []string{`{"targetShardCount":12}`, "no DedupWindow:", "RESULT: PASS — with DedupWindow"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

func TestFlags(t *testing.T) {
	var errOut bytes.Buffer
	if _, err := parseFlags([]string{"--producers", "0"}, &errOut); err == nil {
		t.Fatal("--producers 0 accepted")
	}
	o, err := parseFlags([]string{"--redis", "redis://127.0.0.1:1/0"}, &errOut)
	if err != nil || !strings.HasPrefix(o.prefix, "orders-") {
		t.Fatalf("with --redis the prefix gets a suffix: %q %v", o.prefix, err)
	}
}
