package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/replay"
)

var update = flag.Bool("update", false, "rewrite the golden files in replay/testdata")

// testdata is replay's testdata: the exported scale-in fixture (written by
// replay's tests) and the golden outputs of this command.
const testdata = "../../replay/testdata"

var fixture = filepath.Join(testdata, "scale-in.jsonl")

// result is one run of the program.
type result struct {
	code           int
	stdout, stderr string
}

func runArgs(args ...string) result {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// mustRun runs the program and fails unless it exits with want.
func mustRun(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := runArgs(args...)
	if r.code != want {
		t.Fatalf("replay %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

// writeFile writes a file in a fresh temporary directory and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureLines are the lines of the fixture file, each with its newline.
func fixtureLines(t *testing.T) []string {
	t.Helper()
	lines := strings.SplitAfter(string(mustReadFile(t, fixture)), "\n")
	return lines[:len(lines)-1]
}

// snapshotOf is the snapshot bytes of the fixture folded up to until ("" = all).
func snapshotOf(t *testing.T, until string) []byte {
	t.Helper()
	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := replay.Import(f)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := replay.StateAt(context.Background(), l, replay.Point{UntilID: until})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGolden runs the commands on the fixture file and compares their output
// with replay/testdata/*.golden; go test ./cmd/replay -update rewrites them.
func TestGolden(t *testing.T) {
	group := []string{"--stream-prefix", "orders", "--group", "billing"}
	tests := []struct {
		golden string
		args   []string
	}{
		{"history.txt.golden", append([]string{"history", "-o", "text"}, group...)},
		{"history.json.golden", append([]string{"history"}, group...)},
		{"state.json.golden", []string{"state"}},
		// 2025-03-01T10:00:17Z is entry 18-0: just after the resharding activated.
		{"state-at.json.golden", append([]string{"state", "--at", "2025-03-01T10:00:17Z"}, group...)},
		{"diff.txt.golden", append([]string{"diff", "--from", "6-0", "-o", "text"}, group...)},
		{"rollback-plan.txt.golden", append([]string{"rollback-plan", "reshard-0001", "-o", "text"}, group...)},
		{"events.jsonl.golden", []string{"events", "--type", "resharding.*,group.created", "--stream-prefix", "orders"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			r := mustRun(t, exitOK, append([]string{"--from-file", fixture}, tt.args...)...)
			p := filepath.Join(testdata, tt.golden)
			if *update {
				if err := os.WriteFile(p, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/replay -update writes it)", err)
			}
			if r.stdout != string(want) {
				t.Errorf("replay %s differs from %s (go test ./cmd/replay -update rewrites it)\ngot:\n%s", strings.Join(tt.args, " "), p, r.stdout)
			}
		})
	}
}

func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	before := mustRun(t, exitOK, "--from-file", fixture, "-o", "text", "history", "--stream-prefix", "orders", "--group", "billing")
	after := mustRun(t, exitOK, "history", "--stream-prefix", "orders", "--from-file", fixture, "--group", "billing", "-o", "text")
	if before.stdout != after.stdout {
		t.Fatal("global flags give another output after the command")
	}
	// Positional arguments may come before flags too.
	mustRun(t, exitOK, "rollback-plan", "reshard-0001", "--from-file", fixture, "--stream-prefix", "orders", "--group", "billing")
}

func TestVerifyExitCodes(t *testing.T) {
	lines := fixtureLines(t)
	truncated := writeFile(t, "truncated.jsonl", []byte(strings.Join(lines[:20], "")))
	garbage := fmt.Sprintf(`{"id":"33-0","data":%q}`+"\n", base64.StdEncoding.EncodeToString([]byte("not an envelope")))
	corrupt := writeFile(t, "corrupt.jsonl", []byte(strings.Join(lines, "")+garbage))

	t.Run("log alone", func(t *testing.T) {
		r := mustRun(t, exitOK, "--from-file", fixture, "verify")
		if !strings.Contains(r.stdout, `"match": true`) {
			t.Fatalf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("matching snapshot", func(t *testing.T) {
		snap := writeFile(t, "snap", snapshotOf(t, "20-0"))
		r := mustRun(t, exitOK, "--from-file", fixture, "verify", "--snapshot", snap, "-o", "text")
		if !strings.Contains(r.stdout, "snapshot at 20-0 plus 12 tail entries matches the full fold") {
			t.Fatalf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("snapshot ahead of the log", func(t *testing.T) {
		snap := writeFile(t, "snap", snapshotOf(t, ""))
		r := mustRun(t, exitFailed, "--from-file", truncated, "verify", "--snapshot", snap, "-o", "text")
		if !strings.Contains(r.stdout, "MISMATCH") || !strings.Contains(r.stdout, "after the log's last entry 20-0") {
			t.Fatalf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("unreadable snapshot", func(t *testing.T) {
		snap := writeFile(t, "snap", []byte("garbage"))
		mustRun(t, exitFailed, "--from-file", fixture, "verify", "--snapshot", snap)
	})
	t.Run("undecodable entry", func(t *testing.T) {
		r := mustRun(t, exitSource, "--from-file", corrupt, "verify")
		if !strings.Contains(r.stderr, "33-0") {
			t.Fatalf("stderr does not name the entry:\n%s", r.stderr)
		}
	})
	t.Run("undecodable entry after the point asked about", func(t *testing.T) {
		mustRun(t, exitOK, "--from-file", corrupt, "state", "--until", "32-0")
		r := mustRun(t, exitSource, "--from-file", corrupt, "events")
		if !strings.Contains(r.stderr, "33-0") || strings.Count(r.stdout, "\n") != 32 {
			t.Fatalf("events before the corrupt entry should print, then the error:\nstdout lines %d\nstderr %s", strings.Count(r.stdout, "\n"), r.stderr)
		}
	})
}

func TestExitCodes(t *testing.T) {
	g := []string{"--stream-prefix", "orders", "--group", "billing"}
	file := []string{"--from-file", fixture}
	with := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	notJSON := writeFile(t, "bad.jsonl", []byte("this is not an export\n"))
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"-h"}, exitOK},
		{"command help", []string{"history", "-h"}, exitOK},
		{"no command", nil, exitUsage},
		{"unknown command", []string{"replay-everything"}, exitUsage},
		{"unknown flag", with(file, []string{"history", "--nope"}), exitUsage},
		{"history without a group", with(file, []string{"history"}), exitUsage},
		{"bad output format", with(file, []string{"history", "-o", "yaml"}, g), exitUsage},
		{"state as text", with(file, []string{"state", "-o", "text"}), exitUsage},
		{"state until and at", with(file, []string{"state", "--until", "3-0", "--at", "2025-03-01T10:00:00Z"}), exitUsage},
		{"malformed id", with(file, []string{"state", "--until", "three"}), exitUsage},
		{"malformed time", with(file, []string{"events", "--since", "yesterday"}), exitUsage},
		{"unknown event type", with(file, []string{"events", "--type", "resharding.exploded"}), exitUsage},
		{"reversed diff", with(file, []string{"diff", "--from", "9-0", "--to", "3-0"}, g), exitUsage},
		{"rollback-plan without id", with(file, []string{"rollback-plan"}, g), exitUsage},
		{"stray argument", with(file, []string{"verify", "now"}), exitUsage},
		{"bad redis url", []string{"--redis", "mysql://localhost", "verify"}, exitUsage},
		{"unknown group", with(file, []string{"history", "--stream-prefix", "x", "--group", "y"}), exitFailed},
		{"unknown group in state", with(file, []string{"state", "--stream-prefix", "x", "--group", "y"}), exitFailed},
		{"unknown resharding", with(file, []string{"rollback-plan", "reshard-nope"}, g), exitFailed},
		{"missing file", []string{"--from-file", filepath.Join(t.TempDir(), "nope.jsonl"), "verify"}, exitSource},
		{"not an export file", []string{"--from-file", notJSON, "verify"}, exitSource},
		{"redis unreachable", []string{"--redis", "redis://127.0.0.1:1/0", "verify"}, exitSource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, tt.want, tt.args...)
			if tt.want != exitOK && r.stderr == "" {
				t.Error("nothing on stderr")
			}
		})
	}
}

func TestRedisURLFromEnvironment(t *testing.T) {
	t.Setenv("RSC_REDIS", "redis://127.0.0.1:1/0")
	r := mustRun(t, exitSource, "verify")
	if !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("RSC_REDIS not used: %s", r.stderr)
	}
}

func TestExportRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "copy.jsonl")
	mustRun(t, exitOK, "--from-file", fixture, "export", "--out", out)
	if !bytes.Equal(mustReadFile(t, out), mustReadFile(t, fixture)) {
		t.Fatal("exporting the imported fixture does not give the fixture back")
	}
	stdout := mustRun(t, exitOK, "--from-file", out, "export")
	if stdout.stdout != string(mustReadFile(t, fixture)) {
		t.Fatal("export to stdout differs from the fixture")
	}
}

// TestIntegrationRedis runs the command against a real Redis holding the
// fixture's events and the coordinator's snapshot.
func TestIntegrationRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const stream = "test:events"

	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := replay.Import(f)
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	for _, e := range mem.Entries() {
		batch = append(batch, e.Data)
	}
	log := redisstore.NewLog(rdb, stream)
	ids, err := log.Append(ctx, events.ZeroID, batch)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := replay.StateAt(ctx, log, replay.Point{UntilID: ids[19]})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := redisstore.NewSnapshotStore(rdb, stream).Save(ctx, st.LastID(), snap, 2); err != nil {
		t.Fatal(err)
	}
	remote := []string{"--redis", srv.URL(), "--log-stream", stream}

	r := mustRun(t, exitOK, append(remote, "verify", "-o", "text")...)
	if want := fmt.Sprintf("snapshot at %s plus %d tail entries matches", ids[19], len(ids)-20); !strings.Contains(r.stdout, want) {
		t.Fatalf("verify did not check the Redis snapshot (want %q):\n%s", want, r.stdout)
	}
	r = mustRun(t, exitOK, append(remote, "history", "--stream-prefix", "orders", "--group", "billing", "-o", "text")...)
	if !strings.Contains(r.stdout, "reshard-0001: SCALE_IN 4 -> 2 shards, DEPRECATED") {
		t.Fatalf("history:\n%s", r.stdout)
	}

	// An export of the Redis log reads back to the same events and state.
	out := filepath.Join(t.TempDir(), "redis.jsonl")
	mustRun(t, exitOK, append(remote, "export", "--out", out)...)
	mustRun(t, exitOK, "--from-file", out, "verify")
	// Redis gave the entries other ids; everything else must be the same.
	withoutIDs := regexp.MustCompile(`^\{"id":"[0-9]+-[0-9]+",`)
	fromRedis := strings.Split(mustRun(t, exitOK, "--from-file", out, "events").stdout, "\n")
	fromFile := strings.Split(mustRun(t, exitOK, "--from-file", fixture, "events").stdout, "\n")
	if len(fromRedis) != len(fromFile) {
		t.Fatalf("%d events from Redis, %d in the fixture", len(fromRedis), len(fromFile))
	}
	for i := range fromFile {
		if a, b := withoutIDs.ReplaceAllString(fromRedis[i], ""), withoutIDs.ReplaceAllString(fromFile[i], ""); a != b {
			t.Fatalf("event %d differs:\n%s\n%s", i, a, b)
		}
	}

	// A corrupt entry makes verify fail with its id.
	bad, err := log.Append(ctx, ids[len(ids)-1], [][]byte{[]byte("garbage")})
	if err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, exitSource, append(remote, "verify")...)
	if !strings.Contains(r.stderr, bad[0]) {
		t.Fatalf("stderr does not name %s:\n%s", bad[0], r.stderr)
	}

	// A log stream that does not exist is an empty log, with a warning.
	r = mustRun(t, exitOK, "--redis", srv.URL(), "--log-stream", "nothing:here", "verify", "--no-snapshot")
	if !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("no warning for a missing log stream:\n%s", r.stderr)
	}
}

// TestIntegrationRedisURLForms reads the log through every form of URL the
// coordinator's --redis takes: the sentinels of a primary, and a TLS server
// that wants a client certificate (--redis-tls-*), so the log of a Sentinel
// or TLS deployment can be verified where the coordinator reads it.
func TestIntegrationRedisURLForms(t *testing.T) {
	ss := redistest.StartSentinel(t, 0, 1)
	certs := redistest.NewTLSCerts(t)
	tlsSrv := redistest.StartProcess(t, redistest.WithTLS(certs, true))
	tlsFlags := []string{"--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey}
	const stream = "test:events"
	for _, tt := range []struct {
		name string
		srv  *redistest.Server
		args []string
	}{
		{"sentinel", ss.Primary(t), []string{"--redis", ss.URL()}},
		{"tls", tlsSrv, append([]string{"--redis", tlsSrv.URL()}, tlsFlags...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := appendFixture(t, tt.srv.Client(t), stream)
			r := mustRun(t, exitOK, append(tt.args, "--log-stream", stream, "verify", "--no-snapshot", "-o", "text")...)
			if want := fmt.Sprintf("folded %d entries", n); !strings.Contains(r.stdout, want) {
				t.Fatalf("verify through %s: want %q in\n%s", tt.args[1], want, r.stdout)
			}
		})
	}
	// Without the client certificate the TLS server refuses the connection.
	r := mustRun(t, exitSource, "--redis", tlsSrv.URL(), "--redis-tls-ca", certs.CA, "--log-stream", stream, "verify")
	if !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("without a client certificate: %s", r.stderr)
	}
}

// appendFixture appends the fixture's events to a log stream and returns how
// many there are.
func appendFixture(t *testing.T, rdb redis.UniversalClient, stream string) int {
	t.Helper()
	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := replay.Import(f)
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	for _, e := range mem.Entries() {
		batch = append(batch, e.Data)
	}
	if _, err := redisstore.NewLog(rdb, stream).Append(context.Background(), events.ZeroID, batch); err != nil {
		t.Fatal(err)
	}
	return len(batch)
}

// TestIntegrationRedisTrimmedLog runs the command against a log the
// coordinator trimmed (--trim-log) behind the older of two kept snapshots.
func TestIntegrationRedisTrimmedLog(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const stream = "test:trimmed"

	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := replay.Import(f)
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	for _, e := range mem.Entries() {
		batch = append(batch, e.Data)
	}
	log := redisstore.NewLog(rdb, stream)
	ids, err := log.Append(ctx, events.ZeroID, batch)
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.NewSnapshotStore(rdb, stream)
	for _, at := range []string{ids[15], ids[len(ids)-1]} {
		st, _, err := replay.StateAt(ctx, log, replay.Point{UntilID: at})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := st.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, at, snap, 2); err != nil {
			t.Fatal(err)
		}
	}
	archived, _, err := log.TrimBefore(ctx, ids[15], func(e events.Entry) bool {
		rec, err := events.Decode(e.ID, e.Data)
		return err != nil || coordinator.ArchivedType(rec.Type)
	})
	if err != nil {
		t.Fatal(err)
	}
	remote := []string{"--redis", srv.URL(), "--log-stream", stream}

	r := mustRun(t, exitOK, append(remote, "events")...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if want := int(archived) + len(ids) - 15; len(lines) != want {
		t.Fatalf("events lists %d entries, want %d archived + %d in the log:\n%s", len(lines), archived, len(ids)-15, r.stdout)
	}
	if !strings.Contains(lines[0], `"type":"group.created"`) || strings.Contains(r.stdout, ids[5]+`"`) {
		t.Fatalf("events should start with the archived group.created and skip the trimmed membership entry %s:\n%s", ids[5], r.stdout)
	}
	r = mustRun(t, exitOK, append(remote, "history", "--stream-prefix", "orders", "--group", "billing", "-o", "text")...)
	if !strings.Contains(r.stdout, "reshard-0001: SCALE_IN 4 -> 2 shards, DEPRECATED") || !strings.Contains(r.stdout, ids[14]) {
		t.Fatalf("history lacks the resharding or its archived start %s:\n%s", ids[14], r.stdout)
	}
	r = mustRun(t, exitFailed, append(remote, "state", "--until", ids[3])...)
	if !strings.Contains(r.stderr, "oldest point that can be replayed") || !strings.Contains(r.stderr, ids[15]) {
		t.Fatalf("state before the trim point: stderr does not explain it:\n%s", r.stderr)
	}
	mustRun(t, exitOK, append(remote, "state", "--until", ids[20], "--stream-prefix", "orders", "--group", "billing")...)
	r = mustRun(t, exitOK, append(remote, "verify", "-o", "text")...)
	if !strings.Contains(r.stdout, "OK: folded") || !strings.Contains(r.stdout, "cannot be folded from zero") || !strings.Contains(r.stdout, "from the snapshot at "+ids[15]) {
		t.Fatalf("verify of a trimmed log:\n%s", r.stdout)
	}
	r = mustRun(t, exitOK, append(remote, "export")...)
	if !strings.Contains(r.stderr, "was trimmed") {
		t.Fatalf("export of a trimmed log without a warning:\n%s", r.stderr)
	}
}
