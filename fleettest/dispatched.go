package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// DB is what the assertions read jobs on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Job is a dispatched job as the database holds it: waiting (pending,
// delayed, or parked under its concurrency limit) or running. A job that
// completed, or failed for good, is no longer one.
type Job struct {
	ID    int64
	Name  string
	Queue string
	// Payload is the job's args as stored (jsonb: keys sorted, spacing
	// normalised).
	Payload  json.RawMessage
	Tags     []string
	Priority int
	// Metadata is the job's metadata; nil when it has none.
	Metadata json.RawMessage
	// State is "pending", "delayed", "limited" (parked under its
	// concurrency limit) or "reserved" (running).
	State string
	// Attempts counts the attempts started so far.
	Attempts int
	// MaxTries is what the job set; 0 when it left it to the worker.
	MaxTries int
	// AvailableAt is when the job is due; zero for a parked job.
	AvailableAt time.Time
	CreatedAt   time.Time
	// LastError is the error of its last failed attempt, if any.
	LastError string
}

// Decode unmarshals the job's payload into v (a pointer to its args).
func (j Job) Decode(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return fmt.Errorf("decode payload of job %d (%s): %w", j.ID, j.Name, err)
	}
	return nil
}

// String is a line describing the job, as failure messages list it.
func (j Job) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s queue=%s state=%s", j.ID, j.Name, j.Queue, j.State)
	if j.Priority != 0 {
		fmt.Fprintf(&b, " priority=%d", j.Priority)
	}
	if len(j.Tags) > 0 {
		fmt.Fprintf(&b, " tags=%v", j.Tags)
	}
	fmt.Fprintf(&b, " args=%s", clip(string(j.Payload), 200))
	return b.String()
}

// A Match narrows the jobs an assertion looks for beyond their name.
type Match func(*matcher)

type matcher struct {
	args     any // decoded JSON; nil: any
	argsText string
	subset   bool
	queue    *string
	tags     []string
	priority *int
	meta     [][2]string
	times    int // -1: at least one
	errs     []error
}

// Args matches jobs whose payload equals v as JSON: v is encoded as a
// dispatch encodes it (json.RawMessage and []byte are taken as JSON), then
// both are compared as decoded values, so key order, spacing and number
// formatting do not count. v may be a job's typed args (a queue.JobArgs).
func Args(v any) Match {
	return func(m *matcher) { m.setArgs(v, false) }
}

// ArgsInclude matches jobs whose payload holds what v holds: every key of
// an object in v is in the payload with a matching value (objects
// compared the same way, recursively; arrays and other values equal).
// Keys of the payload that v lacks do not count, which suits payloads
// carrying a timestamp or a generated id.
func ArgsInclude(v any) Match {
	return func(m *matcher) { m.setArgs(v, true) }
}

func (m *matcher) setArgs(v any, subset bool) {
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			m.errs = append(m.errs, fmt.Errorf("encode args to match: %w", err))
			return
		}
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		m.errs = append(m.errs, fmt.Errorf("args to match are not JSON: %w", err))
		return
	}
	m.args, m.argsText, m.subset = d, string(b), subset
}

// OnQueue matches jobs of queue q.
func OnQueue(q string) Match { return func(m *matcher) { m.queue = &q } }

// Tags matches jobs carrying every one of tags (and maybe more).
func Tags(tags ...string) Match { return func(m *matcher) { m.tags = append(m.tags, tags...) } }

// Priority matches jobs of priority n.
func Priority(n int) Match { return func(m *matcher) { m.priority = &n } }

// Meta matches jobs whose metadata holds key with the string value.
func Meta(key, value string) Match {
	return func(m *matcher) { m.meta = append(m.meta, [2]string{key, value}) }
}

// Times makes RequireDispatched want exactly n matching jobs, not at
// least one.
func Times(n int) Match { return func(m *matcher) { m.times = n } }

func newMatcher(opts []Match) *matcher {
	m := &matcher{times: -1}
	for _, o := range opts {
		o(m)
	}
	return m
}

// matches reports whether j is named name and fits every criterion.
func (m *matcher) matches(name string, j Job) bool {
	if j.Name != name || (m.queue != nil && j.Queue != *m.queue) || (m.priority != nil && j.Priority != *m.priority) {
		return false
	}
	for _, tag := range m.tags {
		if !slices.Contains(j.Tags, tag) {
			return false
		}
	}
	for _, kv := range m.meta {
		if metaString(j.Metadata, kv[0]) != kv[1] {
			return false
		}
	}
	if m.argsText != "" {
		var got any
		if json.Unmarshal(j.Payload, &got) != nil {
			return false
		}
		if m.subset {
			return includes(got, m.args)
		}
		return reflect.DeepEqual(got, m.args)
	}
	return true
}

// describe says what the matcher looks for, after the job's name.
func (m *matcher) describe() string {
	var parts []string
	if m.queue != nil {
		parts = append(parts, fmt.Sprintf("on queue %q", *m.queue))
	}
	if m.argsText != "" {
		if m.subset {
			parts = append(parts, "with args including "+clip(m.argsText, 200))
		} else {
			parts = append(parts, "with args "+clip(m.argsText, 200))
		}
	}
	if len(m.tags) > 0 {
		parts = append(parts, fmt.Sprintf("tagged %v", m.tags))
	}
	if m.priority != nil {
		parts = append(parts, fmt.Sprintf("of priority %d", *m.priority))
	}
	for _, kv := range m.meta {
		parts = append(parts, fmt.Sprintf("with metadata %s=%q", kv[0], kv[1]))
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, ", ")
}

// includes reports whether got holds want (see ArgsInclude).
func includes(got, want any) bool {
	w, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	g, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, wv := range w {
		gv, ok := g[k]
		if !ok || !includes(gv, wv) {
			return false
		}
	}
	return true
}

// maxListed bounds the jobs a failure message lists.
const maxListed = 50

// scope is where an assertion looks: every job db sees, or those its
// transaction dispatched.
type scope struct {
	db   DB
	inTx bool
}

func (s scope) String() string {
	if s.inTx {
		return "the transaction dispatched"
	}
	return "are waiting or running"
}

// read returns the jobs of the scope.
func (s scope) read(t testing.TB) []Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	rows, err := store.JobInspect(ctx, s.db, store.JobInspectParams{InTx: s.inTx, Limit: 10_000})
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	jobs := make([]Job, len(rows))
	for i, r := range rows {
		jobs[i] = Job{ID: r.ID, Name: r.Name, Queue: r.Queue, Payload: r.Payload, Tags: r.Tags,
			Priority: r.Priority, Metadata: r.Metadata, State: r.State, Attempts: r.Attempts,
			MaxTries: r.MaxTries, AvailableAt: r.AvailableAt, CreatedAt: r.CreatedAt, LastError: r.LastError}
	}
	return jobs
}

// find returns the jobs of the scope and those matching.
func (s scope) find(t testing.TB, name string, m *matcher) (all, found []Job) {
	t.Helper()
	if len(m.errs) > 0 {
		t.Fatalf("fleettest: %v", m.errs[0])
	}
	all = s.read(t)
	for _, j := range all {
		if m.matches(name, j) {
			found = append(found, j)
		}
	}
	return all, found
}

// listing is the jobs, one a line, for a failure message.
func listing(jobs []Job) string {
	if len(jobs) == 0 {
		return "\n\t(none)"
	}
	var b strings.Builder
	for i, j := range jobs {
		if i == maxListed {
			fmt.Fprintf(&b, "\n\t... and %d more", len(jobs)-maxListed)
			break
		}
		b.WriteString("\n\t" + j.String())
	}
	return b.String()
}

func (s scope) require(t testing.TB, name string, opts []Match) Job {
	t.Helper()
	m := newMatcher(opts)
	all, found := s.find(t, name, m)
	switch {
	case m.times < 0 && len(found) == 0:
		t.Fatalf("fleettest: no job %q%s was dispatched; the jobs that %s:%s", name, m.describe(), s, listing(all))
	case m.times >= 0 && len(found) != m.times:
		t.Fatalf("fleettest: want %d jobs %q%s, found %d; the jobs that %s:%s", m.times, name, m.describe(), len(found), s, listing(all))
	}
	if len(found) == 0 {
		return Job{}
	}
	return found[0]
}

func (s scope) refuse(t testing.TB, name string, opts []Match) {
	t.Helper()
	m := newMatcher(opts)
	if _, found := s.find(t, name, m); len(found) > 0 {
		t.Fatalf("fleettest: want no job %q%s, found %d:%s", name, m.describe(), len(found), listing(found))
	}
}

// RequireDispatched fails the test unless a job named name that fits
// every Match waits or runs in db (with Times, unless exactly that many
// do), and returns the first such job (the oldest). The failure message
// lists the jobs there are instead. Run through a transaction, it sees
// what the transaction sees: the jobs committed and those it dispatched
// itself.
func RequireDispatched(t testing.TB, db DB, name string, opts ...Match) Job {
	t.Helper()
	return scope{db: db}.require(t, name, opts)
}

// RequireDispatchedTx is RequireDispatched among the jobs tx itself
// dispatched (in savepoints too), not yet committed: what a handler or a
// service under test dispatched inside its transaction, before the
// commit. A job tx changed in another way (cancelled, say) counts as
// dispatched by it.
func RequireDispatchedTx(t testing.TB, tx pgx.Tx, name string, opts ...Match) Job {
	t.Helper()
	return scope{db: tx, inTx: true}.require(t, name, opts)
}

// RequireDispatchedArgs is RequireDispatched for a typed job: the job
// named args.JobName() whose payload equals args.
func RequireDispatchedArgs(t testing.TB, db DB, args queue.JobArgs, opts ...Match) Job {
	t.Helper()
	return scope{db: db}.require(t, args.JobName(), append([]Match{Args(args)}, opts...))
}

// RequireNotDispatched fails the test when a job named name that fits
// every Match waits or runs in db, listing those that do.
func RequireNotDispatched(t testing.TB, db DB, name string, opts ...Match) {
	t.Helper()
	scope{db: db}.refuse(t, name, opts)
}

// RequireNotDispatchedTx is RequireNotDispatched among the jobs tx
// dispatched (see RequireDispatchedTx).
func RequireNotDispatchedTx(t testing.TB, tx pgx.Tx, name string, opts ...Match) {
	t.Helper()
	scope{db: tx, inTx: true}.refuse(t, name, opts)
}

// Dispatched returns the jobs named name that fit every Match and wait or
// run in db, oldest first, for checks of a test's own; an empty name
// returns every job db holds (Matches then apply to any name).
func Dispatched(t testing.TB, db DB, name string, opts ...Match) []Job {
	t.Helper()
	m := newMatcher(opts)
	if len(m.errs) > 0 {
		t.Fatalf("fleettest: %v", m.errs[0])
	}
	var out []Job
	for _, j := range (scope{db: db}).read(t) {
		n := name
		if n == "" {
			n = j.Name
		}
		if m.matches(n, j) {
			out = append(out, j)
		}
	}
	return out
}

// metaString is the string value of key in metadata; "" when missing or
// not a string.
func metaString(metadata json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	if len(metadata) == 0 || json.Unmarshal(metadata, &m) != nil {
		return ""
	}
	var v string
	if json.Unmarshal(m[key], &v) != nil {
		return ""
	}
	return v
}

// clip shortens s to at most about n bytes, cut at a character, marking
// the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
