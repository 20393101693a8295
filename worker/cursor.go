package worker

import (
	"cmp"
	"slices"
	"time"

	"github.com/fleet-go/fleet/store"
)

// A claim from the head of a queue's ready index steps over every dead
// entry there. A vacuum, or the scans that pass them, remove such entries
// once no transaction can see the rows they point to; while another
// session holds a transaction open they stay, and the entries of every
// job claimed since pile up in front of the ready ones. So a worker
// claims from where its last claim of each priority ended (a mark, see
// store.ClaimMark), and from the head only now and then: often while a
// claim from the head is cheap, seldom when it is dear. A job that
// becomes ready behind the marks (a dispatch whose transaction began
// before the claimed jobs', a job a claim skipped while another held it
// and then gave back) waits for the next claim from the head: at most
// headClaimFactor times what the last one took, and never more than
// headClaimMaxGap.
const (
	// headClaimFactor makes claims from the head cost at most about one
	// part in headClaimFactor of a worker's claiming.
	headClaimFactor = 20
	// headClaimMaxGap bounds the wait of a job behind the marks.
	headClaimMaxGap = 10 * time.Second
)

// claimCursor is where a worker's claims of one queue begin: the mark of
// each priority (the last job claimed there), and when a claim last read
// from the head and how long it took. The claimer's loop owns it.
type claimCursor struct {
	marks map[int]store.ClaimMark
	// headAt is when the last claim from the head began (zero: none yet),
	// headTook how long it took.
	headAt   time.Time
	headTook time.Duration
}

// after returns the marks the claim beginning at now reads past, in
// priority order, or nil when it is to read from the head: the first
// claim, and one once headGap has passed since the last claim from the
// head began.
func (c *claimCursor) after(now time.Time) []store.ClaimMark {
	if len(c.marks) == 0 || c.headAt.IsZero() || now.Sub(c.headAt) >= c.headGap() {
		return nil
	}
	marks := make([]store.ClaimMark, 0, len(c.marks))
	for _, m := range c.marks {
		marks = append(marks, m)
	}
	slices.SortFunc(marks, func(a, b store.ClaimMark) int { return cmp.Compare(a.Priority, b.Priority) })
	return marks
}

// headGap is how long after a claim from the head the next one is due.
func (c *claimCursor) headGap() time.Duration {
	return min(headClaimFactor*c.headTook, headClaimMaxGap)
}

// claimed notes a claim that began at began and took took, read past
// marks (nil: from the head) and returned jobs, in claim order (nil when
// it failed). Each priority's mark becomes the last job the claim took
// there; a claim from the head may move a mark back, to a job that
// became ready behind it.
func (c *claimCursor) claimed(began time.Time, took time.Duration, marks []store.ClaimMark, jobs []store.ClaimedJob) {
	if marks == nil {
		c.headAt, c.headTook = began, took
	}
	if len(jobs) > 0 && c.marks == nil {
		c.marks = make(map[int]store.ClaimMark)
	}
	for _, j := range jobs {
		c.marks[j.Priority] = store.MarkOf(j)
	}
}
