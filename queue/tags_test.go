package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// Priority, tags and metadata travel with a job on every insert path, to
// the worker's claim, into its failed copy and its history, and back when
// it is retried.
func TestPriorityTagsAndMetadataTravelWithTheJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	c := queue.NewClient(pool, queue.Defaults{})
	st := store.New(pool)
	plain := queue.NewJob("a", nil).Priority(-3).Tags("tenant:42", "import", "tenant:42").Metadata(map[string]string{"k": "v"})
	limited := queue.NewJob("b", nil).Priority(7).Tags("x").Limit("key", 2)
	unique := queue.NewJob("c", nil).Tags("u").SetMeta("trace", "t1").Unique(queue.Unique{Key: "one"})
	idsRes, err := c.DispatchMany(ctx, []*queue.JobSpec{plain, limited, unique})
	if err != nil {
		t.Fatal(err)
	}
	ids := queue.IDs(idsRes)
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 10, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(jobs))
	}
	byID := map[int64]store.ClaimedJob{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	a, b, u := byID[ids[0]], byID[ids[1]], byID[ids[2]]
	if a.Priority != -3 || !slices.Equal(a.Tags, []string{"tenant:42", "import"}) || string(a.Metadata) != `{"k": "v"}` {
		t.Errorf("plain job claimed as priority %d, tags %q, metadata %s", a.Priority, a.Tags, a.Metadata)
	}
	if b.Priority != 7 || !slices.Equal(b.Tags, []string{"x"}) || b.Metadata != nil {
		t.Errorf("limited job claimed as priority %d, tags %q, metadata %s", b.Priority, b.Tags, b.Metadata)
	}
	if !slices.Equal(u.Tags, []string{"u"}) || string(u.Metadata) != `{"trace": "t1"}` {
		t.Errorf("unique job claimed with tags %q, metadata %s", u.Tags, u.Metadata)
	}

	// Fail the plain job for good: its failed copy keeps all three, its
	// history row its tags, and a retry brings them back.
	res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: []store.JobOutcome{{
		Lease: a.Lease(), Kind: store.OutcomeFailed, Status: "failed", Error: "boom", MaxTries: 1,
		Queue: a.Queue, Name: a.Name, Attempt: a.Attempt, StartedAt: a.ReservedAt, FinishedAt: a.ReservedAt}}})
	if err != nil || res.Written != 1 {
		t.Fatalf("fail job: %+v, %v", res, err)
	}
	var histTags []string
	if err := pool.QueryRow(ctx, `SELECT tags FROM fleet_jobs WHERE job_id = $1`, a.ID).Scan(&histTags); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(histTags, []string{"tenant:42", "import"}) {
		t.Errorf("history row tags %q", histTags)
	}
	var failedID int64
	if err := pool.QueryRow(ctx, `SELECT id FROM queue_failed_jobs WHERE job_id = $1`, a.ID).Scan(&failedID); err != nil {
		t.Fatal(err)
	}
	newID, err := st.FailedJobRetry(ctx, failedID)
	if err != nil {
		t.Fatal(err)
	}
	var prio int
	var tags []string
	var meta string
	if err := pool.QueryRow(ctx, `SELECT priority, tags, metadata::text FROM queue_jobs WHERE id = $1`, newID).Scan(&prio, &tags, &meta); err != nil {
		t.Fatal(err)
	}
	if prio != -3 || !slices.Equal(tags, []string{"tenant:42", "import"}) || meta != `{"k": "v"}` {
		t.Errorf("retried job has priority %d, tags %q, metadata %s", prio, tags, meta)
	}
}

// Tags survive quoting: commas, quotes, backslashes and braces are kept as
// they are.
func TestTagsAreStoredAsGiven(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	c := queue.NewClient(pool, queue.Defaults{})
	odd := []string{`a,b`, `q"uote`, `back\slash`, `{brace}`, `NULL`, ` spaced `, "ünï"}
	idRes, err := c.Dispatch(ctx, queue.NewJob("a", nil).Tags(odd...))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	var got []string
	if err := pool.QueryRow(ctx, `SELECT tags FROM queue_jobs WHERE id = $1`, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, odd) {
		t.Errorf("stored tags %q, want %q", got, odd)
	}
}

func TestDispatchRefusesBadPriorityTagsAndMetadata(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	many := make([]string, queue.MaxTags+1)
	for i := range many {
		many[i] = strings.Repeat("t", i+1)
	}
	cases := []struct {
		job  *queue.JobSpec
		want string
	}{
		{queue.NewJob("a", nil).Priority(queue.MaxPriority + 1), "JobSpec.Priority must be between -100 and 100, got 101"},
		{queue.NewJob("a", nil).Priority(queue.MinPriority - 1), "JobSpec.Priority must be between"},
		{queue.NewJob("a", nil).Tags(""), "JobSpec.Tags[0] must not be empty"},
		{queue.NewJob("a", nil).Tags("ok", "bad\nline"), "JobSpec.Tags[1]"},
		{queue.NewJob("a", nil).Tags(strings.Repeat("x", queue.MaxTagBytes+1)), "JobSpec.Tags[0] must be at most 100 bytes"},
		{queue.NewJob("a", nil).Tags(many...), "at most 16 tags, got 17"},
		{queue.NewJob("a", nil).Metadata([]byte(`[1]`)), "metadata must be a JSON object"},
		{queue.NewJob("a", nil).Metadata([]byte(`{`)), "metadata is not valid JSON"},
		{queue.NewJob("a", nil).Metadata(map[string]string{"k": strings.Repeat("v", queue.MaxMetadataBytes)}), "JobSpec.Metadata is"},
	}
	for _, tc := range cases {
		_, err := c.Dispatch(context.Background(), tc.job)
		if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dispatch: %v, want ErrInvalidJob saying %q", err, tc.want)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs inserted (%v), want none", n, err)
	}
}

func TestMetadataAccessors(t *testing.T) {
	t.Parallel()
	j := queue.NewJob("a", nil).Metadata(map[string]any{"n": 1}).SetMeta("trace", "abc")
	if got := j.MetaString("trace"); got != "abc" {
		t.Errorf("MetaString(trace) = %q", got)
	}
	if got := j.MetaString("n"); got != "" {
		t.Errorf("MetaString(n) = %q, want empty for a number", got)
	}
	var m struct {
		N     int    `json:"n"`
		Trace string `json:"trace"`
	}
	if keys := j.MetaKeys(); !slices.Equal(keys, []string{"n", "trace"}) {
		t.Errorf("MetaKeys = %v", keys)
	}
	// The handler's job reads the same metadata.
	job := &queue.Job{Name: "a", Metadata: j.Opts().Metadata}
	if err := job.DecodeMeta(&m); err != nil || m.N != 1 || m.Trace != "abc" {
		t.Errorf("DecodeMeta = %+v, %v", m, err)
	}
	if got := job.MetaString("trace"); got != "abc" {
		t.Errorf("Job.MetaString(trace) = %q", got)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(job.Metadata, &raw); err != nil || len(raw) != 2 {
		t.Errorf("Metadata = %s, %v", job.Metadata, err)
	}
}
