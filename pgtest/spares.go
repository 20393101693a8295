package pgtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

const (
	// spareCount is how many databases the harness keeps copied ahead of
	// the tests that will ask for them: a copy takes a few hundred
	// milliseconds of the server, which a test then does not wait for.
	spareCount = 2
	// dropBatch is how many closed databases wait before they are dropped,
	// all at once. Each DROP DATABASE makes the server write a checkpoint
	// (PostgreSQL 15 does), flushing every database's dirty pages,
	// those of the tests still running included; drops under way together
	// share their checkpoints.
	dropBatch = 8
)

// spares copies the template ahead of the tests and drops the databases
// tests are done with in batches, both in the background, so that a test
// waits for neither. It is the harness's: take starts the copying on the
// first database a process asks for, and stop (from Main, after the
// tests) ends its goroutines, drops what is left and waits for every drop.
type spares struct {
	copy func(context.Context) (string, error) // a new copy of the template
	drop func(string) error                    // drop one database

	ready  chan string // copied ahead, taken by take
	cancel context.CancelFunc
	filler sync.WaitGroup // the goroutine filling ready

	mu      sync.Mutex
	started bool
	stopped bool
	pending []string               // closed, to drop
	batches map[chan struct{}]bool // of the batches being dropped, closed when done
	errs    []error
}

func newSpares(copyTemplate func(context.Context) (string, error), drop func(string) error) *spares {
	return &spares{
		copy:  copyTemplate,
		drop:  drop,
		ready: make(chan string, spareCount-1), // and one in the filler's hand
	}
}

// take returns a database copied ahead, or "" when none is ready (the
// caller then makes its own). The first call starts the copying.
func (s *spares) take() string {
	s.mu.Lock()
	if !s.started && !s.stopped {
		s.started = true
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		s.filler.Add(1)
		go s.fill(ctx)
	}
	s.mu.Unlock()
	select {
	case name := <-s.ready:
		return name
	default:
		return ""
	}
}

// fill keeps ready full until ctx ends or a copy fails. A failed copy ends
// it: the tests then make their own, which fail with the error if it
// persists.
func (s *spares) fill(ctx context.Context) {
	defer s.filler.Done()
	for {
		name, err := s.copy(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.record(fmt.Errorf("copy a database ahead: %w", err))
			}
			return
		}
		select {
		case s.ready <- name:
		case <-ctx.Done():
			s.later(name)
			return
		}
	}
}

// later drops name, a database no test uses any more, with the next
// batch: in the background once dropBatch of them wait, else at stop.
// Once stop has begun, it drops name before it returns.
func (s *spares) later(name string) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.record(s.drop(name))
		return
	}
	defer s.mu.Unlock()
	s.pending = append(s.pending, name)
	if len(s.pending) < dropBatch {
		return
	}
	batch, done := s.pending, make(chan struct{})
	s.pending = nil
	if s.batches == nil {
		s.batches = make(map[chan struct{}]bool)
	}
	s.batches[done] = true
	go func() {
		s.record(s.dropAll(batch))
		s.mu.Lock()
		delete(s.batches, done)
		s.mu.Unlock()
		close(done)
	}()
}

// underWay returns the done channels of the batches being dropped.
func (s *spares) underWay() []chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	var chans []chan struct{}
	for done := range s.batches {
		chans = append(chans, done)
	}
	return chans
}

// dropAll drops the databases of batch at once, so that their drops share
// the checkpoints they wait for.
func (s *spares) dropAll(batch []string) error {
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, name := range batch {
		wg.Go(func() { errs[i] = s.drop(name) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// flush drops the closed databases now instead of with a later batch,
// and waits for the batches under way.
func (s *spares) flush() error {
	s.mu.Lock()
	batch := s.pending
	s.pending = nil
	s.mu.Unlock()
	err := s.dropAll(batch)
	for _, done := range s.underWay() {
		<-done
	}
	return err
}

// record keeps an error for stop.
func (s *spares) record(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

// stop ends the copying, drops every database left (the spares no test
// took, and the closed ones), waits for the batches under way and returns
// the errors met since the start.
func (s *spares) stop() error {
	s.mu.Lock()
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.filler.Wait()
	close(s.ready) // the filler, its only sender, is gone
	var left []string
	for name := range s.ready {
		left = append(left, name)
	}
	s.mu.Lock()
	left = append(left, s.pending...)
	s.pending = nil
	s.mu.Unlock()
	for len(left) > 0 {
		n := min(len(left), dropBatch)
		s.record(s.dropAll(left[:n]))
		left = left[n:]
	}
	for _, done := range s.underWay() { // no batch starts once stopped
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}
