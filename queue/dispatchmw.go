package queue

import (
	"context"
	"encoding/json"
	"fmt"
)

// DispatchMiddleware runs before a job is inserted, for every job of
// every dispatch through the Client (Dispatch, DispatchTx, DispatchMany,
// DispatchManyTx, DispatchSQLTx, DispatchManySQLTx). It may change the
// job (its builder methods, its Payload, its Queue) or refuse it by
// returning an error: the dispatch call then returns that error wrapped,
// and inserts none of its jobs. ctx is the dispatch call's. Register it
// with Client.Use.
type DispatchMiddleware func(ctx context.Context, job *Job) error

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

// intercept passes jobs through the dispatch middleware, if any.
func (c *Client) intercept(ctx context.Context, jobs []*Job) error {
	mw := c.dispatchMW.Load()
	if mw == nil {
		return nil
	}
	for _, j := range jobs {
		if j == nil {
			continue // refused by params
		}
		before := j.Payload
		for _, m := range *mw {
			if err := m(ctx, j); err != nil {
				return fmt.Errorf("dispatch job %q: refused by dispatch middleware: %w", j.Name, err)
			}
		}
		if !sameBytes(before, j.Payload) && j.payloadErr == nil && !json.Valid(j.Payload) {
			return fmt.Errorf("%w: payload of job %q, as dispatch middleware set it, is not valid JSON", ErrInvalidJob, j.Name)
		}
	}
	return nil
}

// sameBytes reports whether a and b are the same slice (not merely equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
