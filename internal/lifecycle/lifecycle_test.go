package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// The contract: Stop before Start is safe and forbids a later Start; a
// second Start fails; Stop twice returns; Stop cancels the service's
// context and waits for its work.
func TestLifecycleContract(t *testing.T) {
	t.Parallel()
	var l Lifecycle
	l.Halt()
	l.Halt()
	if _, _, err := l.Begin(context.Background(), "x"); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop: %v, want ErrStopped", err)
	}

	var l2 Lifecycle
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, end, err := l2.Begin(parent, "y")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l2.Begin(parent, "y"); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	cancelParent()
	if ctx.Err() != nil {
		t.Fatal("the service's context ended with the context of its Start")
	}
	worked := make(chan struct{})
	go func() {
		defer end()
		<-ctx.Done()
		close(worked)
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(l2.Halt)
	}
	wg.Wait()
	select {
	case <-worked:
	default:
		t.Fatal("Stop returned before the service's work ended")
	}
	select {
	case <-l2.Ended():
	default:
		t.Fatal("Ended is not closed after Stop")
	}
}

type recorder struct {
	name string
	fail bool
	log  *[]string
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Start(context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	if r.fail {
		return errors.New(r.name + " cannot start")
	}
	return nil
}

func (r *recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

// StartAll starts in order and stops at the first failure; StopAll stops
// in the reverse; both signal each step.
func TestStartAllAndStopAll(t *testing.T) {
	t.Parallel()
	var log []string
	services := []*recorder{{name: "a", log: &log}, {name: "b", log: &log}, {name: "c", fail: true, log: &log}, {name: "d", log: &log}}
	var sig Signal[string]
	sig.Init()
	n, err := StartAll(context.Background(), services, &sig)
	if err == nil || n != 2 {
		t.Fatalf("StartAll = %d, %v; want 2 started and c's error", n, err)
	}
	StopAll(services[:n], &sig)
	if want := []string{"start a", "start b", "start c", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	var got []string
	for range 4 {
		got = append(got, sig.Wait(t))
	}
	want := []string{"start a", "start b", "stop b", "stop a"}
	if !slices.Equal(got, want) {
		t.Fatalf("signals %v, want %v", got, want)
	}
	if seq := Sequence([]string{"a", "b"}); !slices.Equal(seq, want) {
		t.Fatalf("Sequence(a, b) = %v, want %v", seq, want)
	}
	sig.None(t, "a fifth signal")
	StartAll(context.Background(), services[:0], nil) // a nil signal is fine
}

// A signal not initialised, or nil, takes events and drops them; one
// initialised keeps up to SignalBuffer and never blocks.
func TestSignal(t *testing.T) {
	t.Parallel()
	var nilSig *Signal[int]
	nilSig.Send(1)
	var off Signal[int]
	off.Send(1)
	if off.C() != nil || nilSig.C() != nil {
		t.Fatal("an uninitialised signal has a channel")
	}
	var s Signal[int]
	s.Init()
	for i := range SignalBuffer + 10 {
		s.Send(i)
	}
	if got := s.Wait(t); got != 0 {
		t.Fatalf("first event %d, want 0", got)
	}
	s.Drain()
	s.None(t, "after Drain")
}

// At sees every event as it is sent, the ones past SignalBuffer too.
func TestSignalAt(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	s.Init()
	var seen []int
	s.At(func(v int) { seen = append(seen, v) })
	for i := range SignalBuffer + 10 {
		s.Send(i)
	}
	if len(seen) != SignalBuffer+10 || seen[0] != 0 || seen[len(seen)-1] != SignalBuffer+9 {
		t.Fatalf("At saw %d events (first %d, last %d), want all %d", len(seen), seen[0], seen[len(seen)-1], SignalBuffer+10)
	}
	if got := s.Wait(t); got != 0 {
		t.Fatalf("first event %d, want 0", got)
	}
}
