package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/internal/procs"
)

// EventIDField is the field producers write each message's unique id to.
const EventIDField = "eventId"

// ConsumedKey is the Redis set of the event ids handled in a round's group;
// HandledKey counts handler successes, so duplicates = handled - |consumed|.
// Both live in Redis so that a killed member process loses nothing of them.
func ConsumedKey(prefix string) string { return "chaos-consumed:" + prefix }

// HandledKey: see ConsumedKey.
func HandledKey(prefix string) string { return "chaos-handled:" + prefix }

// MemberSpec configures a member runtime, in process or in a member process.
type MemberSpec struct {
	CoordinatorURL string
	RedisURL       string
	Prefix, Group  string
	Base           string
	Concurrency    int
	// HandlerSleep slows the handler down, so a batch is in flight when the
	// process is killed.
	HandlerSleep time.Duration
	// Lease is the member's local assignment lease: below the coordinator's
	// --member-lease, so a member stops reading before the coordinator may
	// hand its shards on.
	Lease time.Duration
}

// adminCredentials are those of the coordinators the scenario starts: the
// default admin, who holds every role (heartbeats need MEMBER).
var adminCredentials = client.BasicAuth{Username: "admin", Password: "password"}

func (s MemberSpec) config(rdb redis.UniversalClient, onEvent func(member.Event)) member.Config {
	return member.Config{
		Coordinator: client.New(s.CoordinatorURL, adminCredentials), Redis: rdb,
		StreamPrefix: s.Prefix, ConsumerGroup: s.Group, MemberIDBase: s.Base, Concurrency: s.Concurrency,
		MemberLease: s.Lease, Block: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: time.Second,
		ShutdownTimeout: 10 * time.Second, OnEvent: onEvent,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// recordingHandler records the event id in ConsumedKey and counts the call in
// HandledKey (one MULTI), and reports every call to onHandled.
func recordingHandler(rdb redis.UniversalClient, prefix string, sleep time.Duration, onHandled func(m member.Message, start, end time.Time)) member.Handler {
	consumed, handled := ConsumedKey(prefix), HandledKey(prefix)
	return func(ctx context.Context, m member.Message) error {
		start := time.Now()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, consumed, m.Field(EventIDField))
			p.Incr(ctx, handled)
			return nil
		})
		onHandled(m, start, time.Now())
		return err
	}
}

// StartMembers runs an in-process member runtime whose events and handler
// calls go to rec as process proc.
func StartMembers(ctx context.Context, spec MemberSpec, rdb redis.UniversalClient, rec *Recorder, proc string) (*member.Runtime, error) {
	cfg := spec.config(rdb, func(e member.Event) { rec.Event(proc, e) })
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h := recordingHandler(rdb, spec.Prefix, spec.HandlerSleep, func(m member.Message, start, end time.Time) {
		rec.Handled(proc, m.MemberID, m.ShardIndex, start, end)
	})
	return member.Start(ctx, cfg, h)
}

// The member process is a program (the test binary, or cmd/soak) started
// again with memberEnv set: an ordinary service using client/member. It
// writes its events and handler calls as JSON lines on stdout, one write per
// line, so what it wrote survives a SIGKILL.

const memberEnv = "RSC_CHAOS_MEMBER"

// IsMemberProcess reports whether this process was started as a member process.
func IsMemberProcess() bool { return os.Getenv(memberEnv) != "" }

type memberLine struct {
	Kind   string `json:"k"` // "e": runtime event, "h": handler call
	Member string `json:"m"`
	At     int64  `json:"t"`           // unix ns: event time, handler start
	End    int64  `json:"b,omitempty"` // unix ns: handler end
	Event  string `json:"e,omitempty"`
	Shards []int  `json:"s,omitempty"`
}

func (s MemberSpec) env() []string {
	return []string{memberEnv + "=1",
		"RSC_CHAOS_COORDINATOR=" + s.CoordinatorURL, "RSC_CHAOS_REDIS=" + s.RedisURL,
		"RSC_CHAOS_PREFIX=" + s.Prefix, "RSC_CHAOS_GROUP=" + s.Group, "RSC_CHAOS_BASE=" + s.Base,
		"RSC_CHAOS_CONCURRENCY=" + strconv.Itoa(s.Concurrency), "RSC_CHAOS_SLEEP=" + s.HandlerSleep.String(),
		"RSC_CHAOS_LEASE=" + s.Lease.String()}
}

func specFromEnv() (MemberSpec, error) {
	s := MemberSpec{
		CoordinatorURL: os.Getenv("RSC_CHAOS_COORDINATOR"), RedisURL: os.Getenv("RSC_CHAOS_REDIS"),
		Prefix: os.Getenv("RSC_CHAOS_PREFIX"), Group: os.Getenv("RSC_CHAOS_GROUP"), Base: os.Getenv("RSC_CHAOS_BASE"),
	}
	var err error
	if s.Concurrency, err = strconv.Atoi(os.Getenv("RSC_CHAOS_CONCURRENCY")); err != nil {
		return s, fmt.Errorf("RSC_CHAOS_CONCURRENCY: %w", err)
	}
	if s.HandlerSleep, err = time.ParseDuration(os.Getenv("RSC_CHAOS_SLEEP")); err != nil {
		return s, fmt.Errorf("RSC_CHAOS_SLEEP: %w", err)
	}
	if s.Lease, err = time.ParseDuration(os.Getenv("RSC_CHAOS_LEASE")); err != nil {
		return s, fmt.Errorf("RSC_CHAOS_LEASE: %w", err)
	}
	return s, nil
}

// MemberProcessMain runs the member process until SIGTERM (graceful leave) and
// returns its exit status.
func MemberProcessMain() int {
	spec, err := specFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "member process:", err)
		return 2
	}
	opts, err := redis.ParseURL(spec.RedisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "member process:", err)
		return 2
	}
	opts.PoolSize = 64
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	var mu sync.Mutex
	write := func(l memberLine) {
		data, _ := json.Marshal(l)
		data = append(data, '\n')
		mu.Lock()
		defer mu.Unlock()
		_, _ = os.Stdout.Write(data)
	}
	cfg := spec.config(rdb, func(e member.Event) {
		write(memberLine{Kind: "e", Member: e.MemberID, At: e.Time.UnixNano(), Event: string(e.Kind), Shards: e.Shards})
	})
	h := recordingHandler(rdb, spec.Prefix, spec.HandlerSleep, func(m member.Message, start, end time.Time) {
		write(memberLine{Kind: "h", Member: m.MemberID, At: start.UnixNano(), End: end.UnixNano(), Shards: []int{m.ShardIndex}})
	})
	return procs.UntilSignal("member process", func(ctx context.Context) error { return member.Listen(ctx, cfg, h) })
}

// MemberProcess is a running member process, seen from its parent.
type MemberProcess struct {
	Spec MemberSpec
	// Proc names this incarnation in the Recorder.
	Proc string

	proc *procs.Process
	rec  *Recorder
}

// StartMemberProcess starts cmd (a program that calls MemberProcessMain when
// IsMemberProcess) as a member process for spec; its stderr goes to stderr.
func StartMemberProcess(cmd *exec.Cmd, spec MemberSpec, proc string, rec *Recorder, stderr io.Writer) (*MemberProcess, error) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, spec.env()...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &MemberProcess{Spec: spec, Proc: proc, rec: rec}
	if p.proc, err = procs.Start(cmd, func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l memberLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			switch l.Kind {
			case "e":
				rec.Event(proc, member.Event{Time: time.Unix(0, l.At), MemberID: l.Member, Kind: member.EventKind(l.Event), Shards: l.Shards})
			case "h":
				if len(l.Shards) == 1 {
					rec.Handled(proc, l.Member, l.Shards[0], time.Unix(0, l.At), time.Unix(0, l.End))
				}
			}
		}
	}); err != nil {
		return nil, fmt.Errorf("start member process: %w", err)
	}
	return p, nil
}

// MemberIDs are the logical members of the process.
func (p *MemberProcess) MemberIDs() []string {
	return member.MemberIDs(p.Spec.Base, p.Spec.Concurrency)
}

// Kill sends SIGKILL, waits until the process is gone and tells the Recorder.
func (p *MemberProcess) Kill() {
	p.proc.Kill()
	p.rec.Gone(p.Proc, time.Now())
}

// Stop sends SIGTERM (finish in-flight messages, leave) and waits; SIGKILL after grace.
func (p *MemberProcess) Stop(grace time.Duration) {
	if p.proc.Exited() {
		return
	}
	_ = p.proc.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.proc.Done():
	case <-time.After(grace):
		p.Kill()
	}
}
