// Package ratelog keeps a failing operation from flooding the log while
// the database is away.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Log is the limiter: the first failure of a streak is logged, then at most
// one line a minute saying how many failures it stands for, and one line
// when the operation succeeds again. Safe for concurrent use; each key is
// one operation.
type Log struct {
	mu      sync.Mutex
	streaks map[string]*streak
}

type streak struct {
	failures int // since the last line
	total    int
	loggedAt time.Time
}

// Fail records a failure of key and logs msg when due.
func (r *Log) Fail(log *slog.Logger, key, msg string, args ...any) {
	r.mu.Lock()
	if r.streaks == nil {
		r.streaks = map[string]*streak{}
	}
	s := r.streaks[key]
	if s == nil {
		s = &streak{}
		r.streaks[key] = s
	}
	s.failures++
	s.total++
	due := s.loggedAt.IsZero() || time.Since(s.loggedAt) >= time.Minute
	n := s.failures
	if due {
		s.loggedAt, s.failures = time.Now(), 0
	}
	r.mu.Unlock()
	if due {
		log.Warn(msg, append(args, "failures", n)...)
	}
}

// OK records a success of key, logging once if it ends a streak.
func (r *Log) OK(log *slog.Logger, key, msg string) {
	r.mu.Lock()
	s := r.streaks[key]
	delete(r.streaks, key)
	r.mu.Unlock()
	if s != nil {
		log.Info(msg, "failures", s.total)
	}
}
