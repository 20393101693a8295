package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/store"
)

// UnworkedRefresh is how long a Client trusts what it read of which queues
// the live masters work (see OnUnworked).
const UnworkedRefresh = 5 * time.Second

// OnUnworked sets fn to be called after a dispatch that stored jobs on a
// queue no supervisor of any live master works: the jobs are kept, and
// wait until a master whose configuration lists the queue starts. It is
// how an app notices a misspelt queue or a supervisor missing from its
// configuration. fn is called on the dispatching goroutine, after the
// insert (inside the caller's transaction for the Tx forms), once per such
// queue and call, and not at all while no master is live (nothing is
// worked then, which the fleet's status says).
//
// The check reads the live masters' reports at most once per
// UnworkedRefresh, in the dispatch that finds them stale; without fn
// (the default, or nil) a dispatch reads nothing more.
func (c *Client) OnUnworked(fn func(ctx context.Context, queue string)) {
	if fn == nil {
		c.unworked.Store(nil)
		return
	}
	c.unworked.Store(&unworkedCheck{fn: fn})
}

// unworkedCheck is OnUnworked's state: the function and the last view of
// which queues are worked.
type unworkedCheck struct {
	fn func(ctx context.Context, queue string)

	mu     sync.Mutex
	readAt time.Time
	live   bool            // a master was live at readAt
	worked map[string]bool // queues some live master's supervisor works
}

// warnUnworked calls the OnUnworked function for each queue of params that
// no live master works.
func (c *Client) warnUnworked(ctx context.Context, params []store.JobInsertParams) {
	u := c.unworked.Load()
	if u == nil {
		return
	}
	var queues []string
	for _, p := range params {
		if !slices.Contains(queues, p.Queue) {
			queues = append(queues, p.Queue)
		}
	}
	live, worked, ok := u.view(ctx, c.store)
	if !ok || !live {
		return
	}
	for _, q := range queues {
		if !worked[q] {
			u.fn(ctx, q)
		}
	}
}

// view returns the cached view, read again when older than
// UnworkedRefresh. ok is false when it could not be read (the check is
// advisory: then nothing is said).
func (u *unworkedCheck) view(ctx context.Context, st *store.Store) (live bool, worked map[string]bool, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.readAt.IsZero() && time.Since(u.readAt) < UnworkedRefresh {
		return u.live, u.worked, true
	}
	v, err := st.MemberView(ctx)
	if err != nil {
		return false, nil, false
	}
	u.live, u.worked = false, map[string]bool{}
	for _, m := range v.Members {
		if m.Kind != store.KindMaster || !m.Live(v.At) {
			continue
		}
		u.live = true
		r, _ := model.DecodeReport(m.Report) // what a report this version cannot read holds names none
		for _, s := range r.Supervisors {
			for _, q := range s.Queues {
				u.worked[q] = true
			}
		}
	}
	u.readAt = time.Now()
	return u.live, u.worked, true
}
