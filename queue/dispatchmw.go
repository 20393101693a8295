package queue

import (
	"context"
	"encoding/json"
	"fmt"
)

// DispatchMiddleware runs before a job is inserted, for every job of
// every dispatch through the Client (Dispatch, DispatchTx, DispatchMany,
// DispatchManyTx, DispatchSQLTx, DispatchManySQLTx). It may change the
// job (its methods, its Payload, its Queue) or refuse it by returning an
// error: the dispatch call then returns that error wrapped, and inserts
// none of its jobs. It is given a copy of the caller's spec, so what it
// changes is inserted but the caller's spec stays as it was. ctx is the
// dispatch call's. Register it with Client.Use.
type DispatchMiddleware func(ctx context.Context, job *JobSpec) error

// Use adds dispatch middleware; each job passes through all of it, in the
// order added, before it is checked and inserted. Jobs of a batch pass one
// after another, and a refusal stops the batch there. Call Use while
// setting the client up; dispatches already under way keep the middleware
// they started with. A nil middleware panics. Jobs fleet itself inserts
// (periodic schedules, retries of failed jobs) do not go through a Client
// and do not pass through it.
func (c *Client) Use(mw ...DispatchMiddleware) {
	for _, m := range mw {
		if m == nil {
			panic("queue: Client.Use needs non-nil middleware")
		}
	}
	c.mwMu.Lock()
	defer c.mwMu.Unlock()
	var all []DispatchMiddleware
	if old := c.dispatchMW.Load(); old != nil {
		all = append(all, *old...)
	}
	all = append(all, mw...)
	c.dispatchMW.Store(&all)
}

// intercept passes copies of jobs through the dispatch middleware, if
// any, and returns them; without middleware it returns jobs as they are.
func (c *Client) intercept(ctx context.Context, jobs []*JobSpec) ([]*JobSpec, error) {
	mw := c.dispatchMW.Load()
	if mw == nil {
		return jobs, nil
	}
	out := make([]*JobSpec, len(jobs))
	for i, j := range jobs {
		if j == nil {
			continue // refused by params
		}
		j = j.clone()
		out[i] = j
		before := j.Payload
		for _, m := range *mw {
			if err := m(ctx, j); err != nil {
				return nil, fmt.Errorf("dispatch job %q: refused by dispatch middleware: %w", j.Name, err)
			}
		}
		if !sameBytes(before, j.Payload) && j.payloadErr == nil && !json.Valid(j.Payload) {
			return nil, fmt.Errorf("%w: payload of job %q, as dispatch middleware set it, is not valid JSON", ErrInvalidJob, j.Name)
		}
	}
	return out, nil
}

// sameBytes reports whether a and b are the same slice (not merely equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
