package commands

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// churnedWorld is a 128-shard group with records member records: live
// members that hold the balanced assignment, and records-live members that
// joined and left holding nothing (what a join/leave loop leaves behind
// until the records are pruned).
func churnedWorld(records, live int) *world {
	w := group(128)
	ids := make([]string, live)
	for i := range ids {
		ids[i] = fmt.Sprintf("live-%04d", i)
		w.join(ids[i])
	}
	for i := 0; i < records-live; i++ {
		id := fmt.Sprintf("gone-%04d", i)
		w.join(id).leave(id)
	}
	targets := Assign(nil, ids, 128)
	w.assign(targets)
	for _, id := range ids {
		w.grant(id, w.g, targets[id]...).own(id, targets[id], nil)
	}
	return w
}

// steadyTable is the runtime table of a world whose members all heartbeat
// just now, after one maintenance decision (which sets the lease floor, as
// the tick does).
func steadyTable(w *world, r Rules, now time.Time) *RuntimeTable {
	table := NewRuntimeTable()
	table.Rearm(w.st, now, r.MemberLease)
	bc := NewBatch(w.st, table, now)
	t := &Tx{B: bc, RT: bc.RT.Child(now), Rules: r, Now: now, Log: zerolog.Nop()}
	expireLapsed(t, rulesKey)
	t.RT.Merge()
	table.Commit(bc.RT)
	return table
}

// BenchmarkJoinDecision is one join's decision (a heartbeat with epoch 0 from
// a member the group does not know), decided in a batch and not appended, in
// a group with 10 member records against one with 3,000 (most of them left,
// as a join/leave loop leaves them). Cost proportional to change: the two
// should take about the same time.
func BenchmarkJoinDecision(b *testing.B) {
	for _, c := range []struct{ records, live int }{{1, 1}, {3000, 1}, {10, 10}, {3000, 10}, {3000, 100}, {3000, 3000}} {
		b.Run(fmt.Sprintf("records=%d/live=%d", c.records, c.live), func(b *testing.B) {
			w := churnedWorld(c.records, c.live)
			r := testRules()
			now := rulesNow()
			table := steadyTable(w, r, now)
			req := beat{member: "joiner"}.request()
			b.ReportAllocs()
			for b.Loop() {
				bc := NewBatch(w.st, table, now)
				t := &Tx{B: bc, RT: bc.RT.Child(now), Rules: r, Now: now, Log: zerolog.Nop()}
				resp, err := heartbeat(t, rulesKey, "joiner", "", req)
				if err != nil || resp.Status != wire.StatusOK {
					b.Fatalf("join: %v %+v", err, resp)
				}
			}
		})
	}
}

// BenchmarkJoinAfterJoinInBatch is a join decided after another member's
// join in the same batch (the group is then the overlay's layered copy), in a
// group with 10 member records against one full at --max-members-per-group
// (4,096: the join prunes the oldest terminal record first). Cost
// proportional to change: the two should take about the same time.
func BenchmarkJoinAfterJoinInBatch(b *testing.B) {
	for _, records := range []int{10, 4096} {
		b.Run(fmt.Sprintf("records=%d/live=1", records), func(b *testing.B) {
			w := churnedWorld(records, 1)
			r := testRules()
			now := rulesNow()
			table := steadyTable(w, r, now)
			first, second := beat{member: "first"}.request(), beat{member: "second"}.request()
			b.ReportAllocs()
			for b.Loop() {
				bc := NewBatch(w.st, table, now)
				for _, j := range []struct {
					id  string
					req *wire.HeartbeatRequest
				}{{"first", first}, {"second", second}} {
					t := &Tx{B: bc, RT: bc.RT.Child(now), Rules: r, Now: now, Log: zerolog.Nop()}
					resp, err := heartbeat(t, rulesKey, j.id, "", j.req)
					if err != nil || resp.Status != wire.StatusOK {
						b.Fatalf("join %s: %v %+v", j.id, err, resp)
					}
					t.RT.Merge()
				}
			}
		})
	}
}

// BenchmarkLeaveDecision is one live member's leave (epoch -1), decided and
// not appended, at 10 and 3,000 member records.
func BenchmarkLeaveDecision(b *testing.B) {
	for _, c := range []struct{ records, live int }{{1, 1}, {3000, 1}, {10, 10}, {3000, 10}, {3000, 100}, {3000, 3000}} {
		b.Run(fmt.Sprintf("records=%d/live=%d", c.records, c.live), func(b *testing.B) {
			w := churnedWorld(c.records, c.live)
			r := testRules()
			now := rulesNow()
			table := steadyTable(w, r, now)
			g, _ := w.st.Group(rulesKey)
			req := beat{member: "live-0000", epoch: -1, mv: g.MetadataVersion}.request()
			b.ReportAllocs()
			for b.Loop() {
				bc := NewBatch(w.st, table, now)
				t := &Tx{B: bc, RT: bc.RT.Child(now), Rules: r, Now: now, Log: zerolog.Nop()}
				resp, err := heartbeat(t, rulesKey, "live-0000", "", req)
				if err != nil || resp.Status != wire.StatusOK {
					b.Fatalf("leave: %v %+v", err, resp)
				}
			}
		})
	}
}

// BenchmarkSteadyHeartbeat is the steady path (no writer) of a live member at
// 10 and 3,000 member records.
func BenchmarkSteadyHeartbeat(b *testing.B) {
	for _, c := range []struct{ records, live int }{{1, 1}, {3000, 1}, {10, 10}, {3000, 10}, {3000, 100}, {3000, 3000}} {
		b.Run(fmt.Sprintf("records=%d/live=%d", c.records, c.live), func(b *testing.B) {
			w := churnedWorld(c.records, c.live)
			r := testRules()
			now := rulesNow()
			table := steadyTable(w, r, now)
			g := w.group()
			m := g.Member("live-0000")
			req := beat{member: m.ID, epoch: g.AssignmentEpoch, mv: g.MetadataVersion, owned: m.Current}.request()
			b.ReportAllocs()
			for b.Loop() {
				if resp := Steady(r, table, g.ReadOnly(), rulesKey, m.ID, req, now.Add(time.Second)); resp == nil {
					b.Fatal("not steady")
				}
			}
		})
	}
}

// TestMaintenanceDue: the tick's cheap scan finds a group with something to
// do (a lease that passed, a terminal record past the retention) and, once its
// maintenance decision ran, leaves alone a group of thousands of records with
// nothing to do.
func TestMaintenanceDue(t *testing.T) {
	r := testRules()
	r.StaleRetention = 24 * time.Hour
	w := churnedWorld(3000, 10)
	now := w.group().UpdatedAt.Add(time.Second)
	table := NewRuntimeTable()
	table.Rearm(w.st, now, r.MemberLease)
	due := func() []projection.GroupKey { return Due(w.st, table, r, now, now) }
	if due := due(); len(due) != 1 {
		t.Fatalf("due %v before any maintenance decision, want the group (its lease floor is unknown)", due)
	}
	table = steadyTable(w, r, now)
	if due := due(); len(due) != 0 {
		t.Fatalf("due %v with every lease renewed now and the records younger than the retention", due)
	}
	lapsed("live-0003")(table, now)
	if due := due(); len(due) != 1 {
		t.Fatalf("due %v with a lapsed lease, want the group", due)
	}
	table = steadyTable(w, r, now)
	later := now.Add(r.StaleRetention + time.Hour)
	now = later
	table.renew(rulesKey, "live-0000", renewal{at: later, lease: r.MemberLease}) // leases are not what is due
	if due := due(); len(due) != 1 {
		t.Fatalf("due %v with terminal records past the retention, want the group", due)
	}
}

// TestDecisionsReadGroupsThroughMethods: a decision may see a layered group
// (an overlay's copy-on-write copy), whose Members and Targets maps are nil;
// so this package reads members and targets only through the group's
// methods (Member, EachMember, Target, TargetOf, ...), never the maps.
func TestDecisionsReadGroupsThroughMethods(t *testing.T) {
	files, err := filepath.Glob("*.go")
	more, _ := filepath.Glob("../coordinator/*.go") // the writer and the reconciler read groups too
	files = append(files, more...)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, isIdent := sel.X.(*ast.Ident); isIdent && pkg.Name == "events" {
				return true // the type events.Targets
			}
			if sel.Sel.Name == "Members" || sel.Sel.Name == "Targets" {
				t.Errorf("%s: reads the %s map of a group (use the group's methods)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
