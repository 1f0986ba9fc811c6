package coordinator

import "github.com/rscoord/rsc/projection"

// backlog is the writer's queue: the requests taken from the channel and not
// yet run, in the order they were submitted, and which batch runs next.
//
// Most decisions run in that order, consecutive ones folded into one append.
// A heartbeat's decision names its group (its lane), and among heartbeats the
// order gives way to fairness between groups: when some of those waiting
// belong to groups that had no decision in the batch just run and others to
// groups that had, the next batch holds the first ones only. A group that
// floods the writer with joins and leaves then costs another group's
// heartbeat at most one of the flood's batches (the one in flight, or the
// next when the batch in flight is that group's own): that heartbeat is not
// queued behind the flood, and does not share its batch (and so its
// decisions, its append and its apply) with the flood's. Decisions of one group keep their order;
// heartbeats of different groups were submitted concurrently, so either
// order is one they could have had. A decision without a lane (admin
// commands, maintenance, the reconciler's, a term's start) and a writer job
// keep their place: nothing submitted after one runs before it.
type backlog struct {
	reqs []*request
	// last is the lanes of the batch run last.
	last map[projection.GroupKey]bool
}

// take adds requests waiting in c to the backlog, without blocking, until it
// holds max.
func (q *backlog) take(c <-chan *request, max int) {
	for len(q.reqs) < max {
		select {
		case r := <-c:
			q.reqs = append(q.reqs, r)
		default:
			return
		}
	}
}

// next removes from the backlog what runs next: a writer job alone, or a
// batch of at most max decisions.
func (q *backlog) next(max int) (batch []*request, job *request) {
	if len(q.reqs) == 0 {
		return nil, nil
	}
	if q.reqs[0].job != nil {
		job = q.reqs[0]
		q.reqs = q.reqs[1:]
		return nil, job
	}
	// The heartbeats at the head, up to the first request without a lane,
	// are the ones fairness may reorder.
	laned, fresh := 0, 0
	for _, r := range q.reqs {
		if !r.laned {
			break
		}
		laned++
		if !q.last[r.lane] {
			fresh++
		}
	}
	if fresh > 0 && fresh < laned {
		batch = make([]*request, 0, min(fresh, max))
		rest := q.reqs[:0] // filtered in place: rest never passes i
		for i, r := range q.reqs {
			if i < laned && len(batch) < max && !q.last[r.lane] {
				batch = append(batch, r)
			} else {
				rest = append(rest, r)
			}
		}
		clear(q.reqs[len(rest):])
		q.reqs = rest
	} else {
		n := 0
		for n < len(q.reqs) && n < max && q.reqs[n].job == nil {
			n++
		}
		batch = append([]*request(nil), q.reqs[:n]...)
		clear(q.reqs[:n])
		q.reqs = q.reqs[n:]
	}
	if q.last == nil {
		q.last = map[projection.GroupKey]bool{}
	}
	clear(q.last)
	for _, r := range batch {
		if r.laned {
			q.last[r.lane] = true
		}
	}
	return batch, nil
}

// rejectAll answers every request in the backlog with err and empties it.
func (q *backlog) rejectAll(err error) {
	for _, r := range q.reqs {
		r.done <- err
	}
	q.reqs = nil
}
