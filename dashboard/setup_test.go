package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// secret is a value under a hidden key (log.redact's api_key) in the
// payloads and errors of the test's jobs: no answer and no page may hold
// it.
const secret = "s3cr3t"

// hostile is markup that must reach the page as text.
const hostile = `<img src=x onerror=alert(1)></script><script>alert(1)</script>`

// bundle is one test's fleet: a database with jobs, failed jobs, a master
// row and snapshots, a service, tokens, and the dashboard on a server.
type bundle struct {
	pool                     *pgxpool.Pool
	svc                      *fleet.Service
	srv                      *httptest.Server
	base                     string // the server's URL + /_fleet
	view, operate            string
	revoked, expired         string
	failedIDs                map[string]int64 // by the payload's "to"
	hostileFailed            int64            // the failed job with hostile markup
	pendingJobID             int64
	masterName, supervisorNm string
}

// failJobs dispatches jobs that fail on their only try, their error
// quoting their payload as careless handlers do, and works them with a
// real worker, so they end in queue_failed_jobs with their history.
func failJobs(t *testing.T, pool *pgxpool.Pool, jobs ...*queue.JobSpec) {
	t.Helper()
	ctx := t.Context()
	reg := queue.NewRegistry()
	fail := func(_ context.Context, j *queue.Job) error {
		return errors.New("boom: " + string(j.Payload) + "\ngoroutine 1 [running]:\nmain.handler()\n\t/app/main.go:42")
	}
	reg.Handle("boom", fail)
	reg.Handle(hostile, fail)
	c := queue.NewClient(pool, queue.Defaults{Tries: 1})
	if _, err := c.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(store.New(pool), reg, worker.Config{Queues: []string{"default", "mail"}, StopWhenEmpty: true, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func setup(t *testing.T, opts dashboard.Options) *bundle {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	b := &bundle{pool: pool, svc: fleet.New(pool, fleet.Options{Periodic: schedules(t)}), masterName: "web-1", supervisorNm: "default"}

	failJobs(t, pool,
		queue.NewJob("boom", map[string]string{"to": "ann", "api_key": secret}),
		queue.NewJob("boom", map[string]string{"to": "bob", "api_key": secret}).OnQueue("mail"),
		queue.NewJob("boom", map[string]string{"to": "cyd", "api_key": secret}),
		queue.NewJob(hostile, map[string]string{"note": hostile, "api_key": secret}).OnQueue("mail"),
	)
	failed, err := b.svc.FailedJobs(ctx, fleet.FailedFilter{})
	if err != nil || len(failed) != 4 {
		t.Fatalf("failed jobs: %d, %v", len(failed), err)
	}
	b.failedIDs = map[string]int64{}
	for _, f := range failed {
		var p struct{ To string }
		if err := json.Unmarshal(f.Payload, &p); err != nil {
			t.Fatal(err)
		}
		b.failedIDs[p.To] = f.ID
		if f.Name == hostile {
			b.hostileFailed = f.ID
		}
	}
	c := queue.NewClient(pool, queue.Defaults{})
	res, err := c.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("mail.send", map[string]string{"to": "dan", "password": secret}).OnQueue("mail"),
		queue.NewJob("mail.send", map[string]string{"to": "eve"}).OnQueue("mail"),
		queue.NewJob("report.build", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := queue.IDs(res)
	b.pendingJobID = ids[0]
	report := `{"supervisors":[{"name":"default","queues":["default","mail"],"balance":"auto","paused":false,"processes":{"default":1,"mail":2},"running":3}],"jobs_per_minute":0,"memory_mb":20}`
	if _, err := store.New(pool).MemberBeat(ctx, store.MemberBeatParams{
		Instance: "i-1", Name: b.masterName, Host: "web-1.example", PID: 4242, Version: "1.0.0", State: "running",
		Report: json.RawMessage(report), TTL: time.Hour,
	}, false); err != nil {
		t.Fatal(err)
	}
	// Snapshots of the last minutes, as a master writes them.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, failed, jobs_per_minute, runtime_p50_ms, runtime_p95_ms, runtime_mean_ms)
		SELECT date_trunc('minute', now()) - m * interval '1 minute', k, s, 10 + m, 1, 10 + m, 5, 9, 6
		FROM generate_series(1, 5) m, (VALUES ('queue', 'mail'), ('queue', 'default'), ('job', 'mail.send')) v(k, s)`); err != nil {
		t.Fatal(err)
	}

	b.view = b.token(t, "viewer", "view")
	b.operate = b.token(t, "operator", "view,operate")
	b.revoked = b.token(t, "gone", "view,operate")
	if _, err := b.svc.RevokeToken(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	b.expired = b.token(t, "old", "view,operate")
	if _, err := pool.Exec(ctx, `UPDATE fleet_tokens SET expires_at = now() - interval '1 second' WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	h := dashboard.New(b.svc, opts)
	path := opts.Path
	if path == "" {
		path = dashboard.DefaultPath
	}
	mux.Handle(path, h)
	mux.Handle(path+"/", h)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	b.base = b.srv.URL + path
	return b
}

// schedules are the app's periodic schedules: "nightly" of the
// configuration and "heartbeat" registered in Go, as the commands build
// them.
func schedules(t *testing.T) []periodic.Schedule {
	t.Helper()
	jobs := queue.NewRegistry()
	jobs.Handle("ops.heartbeat", func(context.Context, *queue.Job) error { return nil })
	jobs.Periodic("heartbeat", "@every 30s", queue.NewJob("ops.heartbeat", nil).OnQueue("ops"), queue.PeriodicOpts{CatchUp: queue.CatchUpLast})
	code, err := jobs.PeriodicSchedules(queue.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return append(code, periodic.Schedule{
		Name: "nightly", Source: periodic.SourceConfig, Spec: periodic.MustParse("0 3 * * *", berlin), Job: "report.build", Queue: "default",
		CatchUp: periodic.CatchUpAll, CatchUpMax: 10,
	})
}

func (b *bundle) token(t *testing.T, name, abilities string) string {
	t.Helper()
	as, err := fleet.ParseAbilities(abilities)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := b.svc.CreateToken(t.Context(), fleet.TokenParams{Name: name, Abilities: as})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// answer is one API answer.
type answer struct {
	code   int
	header http.Header
	raw    string
	body   map[string]any
}

// do sends method path (below the API) with token (none when empty) and
// body (none when empty) and checks what every answer must be: JSON,
// never cached, not sniffed, without the secret.
func (b *bundle) do(t *testing.T, method, path, token, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+"/api/"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Errorf("%s %s: %d, not a JSON object: %q", method, path, a.code, raw)
	}
	for k, want := range map[string]string{
		"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Content-Type": "application/json; charset=utf-8",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s %s: %s = %q, want %q", method, path, k, got, want)
		}
	}
	if strings.Contains(a.raw, secret) {
		t.Errorf("%s %s: the answer holds the secret: %s", method, path, raw)
	}
	return a
}
