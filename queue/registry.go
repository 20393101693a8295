package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// HandlerFunc runs one attempt of a job. Returning an error fails the
// attempt; the job is retried after its backoff until its tries are spent.
// ctx is cancelled when the attempt's timeout passes. Handlers must be
// idempotent: delivery is at least once.
type HandlerFunc func(ctx context.Context, job *Job) error

// Registry maps job names to handlers, and holds what runs around them:
// work middleware (Use), error hooks (OnError) and event subscriptions
// (Subscribe). It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]HandlerFunc
	// wrapped holds the handlers inside the work middleware (see Use).
	wrapped    map[string]HandlerFunc
	middleware []WorkMiddleware
	onError    []ErrorHook
	events     eventHub
	// periodic are the periodic jobs (see Periodic), in the order
	// registered.
	periodic []periodicJob
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string]HandlerFunc{}, wrapped: map[string]HandlerFunc{}}
}

// Handle registers h for jobs named name. Registering a name twice, an
// empty name or a nil handler is a programming error and panics, like
// http.ServeMux does.
func (r *Registry) Handle(name string, h HandlerFunc) {
	if name == "" || h == nil {
		panic("queue: Handle needs a name and a handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[name]; dup {
		panic(fmt.Sprintf("queue: handler for %q registered twice", name))
	}
	r.handlers[name] = h
	r.wrapped[name] = wrap(h, r.middleware)
}

// Lookup returns the handler registered for name, without the work
// middleware; Run runs a job through both.
func (r *Registry) Lookup(name string) (HandlerFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[name]
	return h, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.handlers))
	for n := range r.handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
