package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fleet-go/fleet/store"
)

// Limits of the shared inserter.
const (
	// insertRoundJobs is the most jobs one shared insert takes.
	insertRoundJobs = 1000
	// insertTimeout bounds one shared insert.
	insertTimeout = 30 * time.Second
)

// inserter gathers concurrent dispatches on a pool into shared inserts,
// like a database's group commit: while one insert is in flight, the
// dispatches that arrive wait for it, and the first of them then inserts
// all of theirs in one statement and one commit. A lone dispatch inserts at
// once. Each dispatch still succeeds or fails on its own: when a shared
// insert fails, its dispatches are inserted again one by one, so that one
// bad job fails only its own call.
type inserter struct {
	st *store.Store

	mu      sync.Mutex
	busy    bool // an insert is in flight
	waiting []*insertCall
}

type insertCall struct {
	ctx    context.Context
	params []store.JobInsertParams
	// done receives nil once ids is set or err is the call's own error; or
	// errLead when the call is to run the next shared insert itself.
	done chan error
	ids  []int64
	// taken is set under the lock once the call is part of an insert; it
	// must then wait for that insert's answer.
	taken bool
}

// errLead tells a waiting call to run the next shared insert itself.
var errLead = errors.New("lead the next insert")

func newInserter(st *store.Store) *inserter { return &inserter{st: st} }

// insert inserts params and returns their ids in order.
func (in *inserter) insert(ctx context.Context, params []store.JobInsertParams) ([]int64, error) {
	call := &insertCall{ctx: ctx, params: params, done: make(chan error, 1)}
	in.mu.Lock()
	if !in.busy {
		in.busy = true
		call.taken = true
		in.mu.Unlock()
		return in.answer(call, errLead)
	}
	in.waiting = append(in.waiting, call)
	in.mu.Unlock()
	select {
	case err := <-call.done:
		return in.answer(call, err)
	case <-ctx.Done():
		in.mu.Lock()
		if !call.taken {
			in.waiting = slices.DeleteFunc(in.waiting, func(c *insertCall) bool { return c == call })
			in.mu.Unlock()
			return nil, ctx.Err()
		}
		in.mu.Unlock()
		// Already being inserted: its answer decides.
		return in.answer(call, <-call.done)
	}
}

// answer returns what became of call, running the next shared insert
// first when it was handed the lead.
func (in *inserter) answer(call *insertCall, err error) ([]int64, error) {
	if err == errLead {
		in.lead(call)
		err = <-call.done
	}
	return call.ids, err
}

// lead runs one shared insert: first's jobs and those of the calls
// waiting, up to insertRoundJobs, then hands the lead to the next call
// still waiting, if any.
func (in *inserter) lead(first *insertCall) {
	round := []*insertCall{first}
	n := len(first.params)
	in.mu.Lock()
	rest := in.waiting[:0]
	for _, c := range in.waiting {
		if n+len(c.params) <= insertRoundJobs && c.ctx.Err() == nil {
			c.taken = true
			round = append(round, c)
			n += len(c.params)
		} else {
			rest = append(rest, c)
		}
	}
	in.waiting = rest
	in.mu.Unlock()

	in.run(round, n)

	in.mu.Lock()
	if len(in.waiting) == 0 {
		in.busy = false
		in.mu.Unlock()
		return
	}
	next := in.waiting[0]
	in.waiting = in.waiting[1:]
	next.taken = true
	in.mu.Unlock()
	next.done <- errLead
}

// run inserts the round's jobs in one statement, or each call's on its own
// if that fails, and answers every call. Each insert wakes the idle workers
// of its ready queues in the same round trip and transaction (see
// store.JobInsertManyNotify): the inserter runs one at a time, so a
// client's inserts never queue behind each other's notifications, and no
// notification outlives the call that sent it.
func (in *inserter) run(round []*insertCall, n int) {
	all := round[0].params
	ctx := round[0].ctx
	if len(round) > 1 {
		all = make([]store.JobInsertParams, 0, n)
		for _, c := range round {
			all = append(all, c.params...)
		}
		// The statement serves several callers: none of their contexts
		// alone may cancel it.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), insertTimeout)
		defer cancel()
	}
	ids, err := in.st.JobInsertManyNotify(ctx, all, readyQueues(all))
	if err != nil && len(round) > 1 {
		for _, c := range round {
			c.ids, err = in.st.JobInsertManyNotify(c.ctx, c.params, readyQueues(c.params))
			c.done <- err
		}
		return
	}
	if err != nil {
		round[0].done <- err
		return
	}
	for _, c := range round {
		c.ids, ids = ids[:len(c.params):len(c.params)], ids[len(c.params):]
		c.done <- nil
	}
}

// readyQueues lists, once each, the queues of jobs available at once.
func readyQueues(params []store.JobInsertParams) []string {
	var out []string
	for _, p := range params {
		if p.Delay <= 0 && !slices.Contains(out, p.Queue) {
			out = append(out, p.Queue)
		}
	}
	return out
}
