package dashboard_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/queue"
)

// TestDashboardAPIAccess calls every route with no token, a view token
// and an operate token: 401, then 403 for the operate routes, then 2xx,
// each answer JSON, never cached, and free of the secret.
func TestDashboardAPIAccess(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ids := b.failedIDs
	type call struct {
		method, path, body string
		operate            bool
		check              func(t *testing.T, a answer)
	}
	has := func(keys ...string) func(*testing.T, answer) {
		return func(t *testing.T, a answer) {
			t.Helper()
			for _, k := range keys {
				if _, ok := a.body[k]; !ok {
					t.Errorf("answer without %q: %s", k, a.raw)
				}
			}
		}
	}
	calls := []call{
		{method: "GET", path: "me", check: has("abilities")},
		{method: "GET", path: "overview", check: func(t *testing.T, a answer) {
			has("status", "jobs_per_minute", "jobs_past_hour", "failed_past_7_days", "processes", "longest_wait", "busiest_queue", "slowest_queue")(t, a)
			if a.body["status"] != "Running" || a.body["processes"] != 3.0 || a.body["failed_past_7_days"] != 4.0 || a.body["jobs_past_hour"] != 130.0 {
				t.Errorf("overview: %s", a.raw)
			}
			if w, _ := a.body["longest_wait"].(map[string]any); w["queue"] == nil {
				t.Errorf("longest wait: %s", a.raw)
			}
		}},
		{method: "GET", path: "workload", check: func(t *testing.T, a answer) {
			qs, _ := a.body["queues"].([]any)
			var names []string
			for _, q := range qs {
				names = append(names, q.(map[string]any)["queue"].(string))
			}
			if !slices.Contains(names, "mail") || !slices.Contains(names, "default") {
				t.Errorf("workload: %s", a.raw)
			}
		}},
		{method: "GET", path: "masters", check: func(t *testing.T, a answer) {
			ms, _ := a.body["masters"].([]any)
			if len(ms) != 1 || ms[0].(map[string]any)["name"] != b.masterName || ms[0].(map[string]any)["beat_age_secs"] == nil {
				t.Errorf("masters: %s", a.raw)
			}
		}},
		{method: "GET", path: "jobs", check: func(t *testing.T, a answer) {
			if js, _ := a.body["jobs"].([]any); len(js) != 3 || a.body["status"] != "pending" || !strings.Contains(a.raw, "[redacted]") {
				t.Errorf("pending jobs: %s", a.raw)
			}
		}},
		{method: "GET", path: "jobs?status=completed&queue=mail&page=1", check: has("jobs", "has_more")},
		{method: "GET", path: fmt.Sprintf("jobs/%d", b.pendingJobID), check: func(t *testing.T, a answer) {
			if a.body["state"] != "pending" || !strings.Contains(a.raw, "[redacted]") {
				t.Errorf("job story: %s", a.raw)
			}
		}},
		{method: "GET", path: "failed", check: func(t *testing.T, a answer) {
			if a.body["total"] != 4.0 {
				t.Errorf("failed: %s", a.raw)
			}
		}},
		{method: "GET", path: "failed?search=" + secret, check: func(t *testing.T, a answer) {
			if a.body["total"] != 0.0 {
				t.Errorf("a search found jobs by a hidden value: %s", a.raw)
			}
		}},
		{method: "GET", path: "failed?search=cyd&queue=default&page=1", check: func(t *testing.T, a answer) {
			if a.body["total"] != 1.0 {
				t.Errorf("search cyd: %s", a.raw)
			}
		}},
		{method: "GET", path: fmt.Sprintf("failed/%d", ids["ann"]), check: func(t *testing.T, a answer) {
			if a.body["state"] != "failed" || len(a.body["attempts"].([]any)) != 1 || !strings.Contains(a.raw, "goroutine 1") {
				t.Errorf("failed story: %s", a.raw)
			}
		}},
		{method: "GET", path: "metrics", check: has("rows", "queues", "jobs", "span_secs", "bucket_secs")},
		{method: "GET", path: "metrics?period=day&queue=mail", check: func(t *testing.T, a answer) {
			rows, _ := a.body["rows"].([]any)
			if len(rows) == 0 {
				t.Fatalf("no rows: %s", a.raw)
			}
			for _, r := range rows {
				if r := r.(map[string]any); r["kind"] != "queue" || r["subject"] != "mail" {
					t.Errorf("metrics for queue mail hold %v", r)
				}
			}
		}},
		{method: "GET", path: "metrics?period=week&job=mail.send", check: has("rows")},
		{method: "GET", path: "periodic", check: func(t *testing.T, a answer) {
			ss, _ := a.body["schedules"].([]any)
			var got []string
			for _, s := range ss {
				s := s.(map[string]any)
				got = append(got, fmt.Sprint(s["name"], "/", s["source"]))
			}
			if !slices.Equal(got, []string{"heartbeat/code", "nightly/config"}) || a.body["at"] == nil {
				t.Errorf("periodic: %s", a.raw)
			}
		}},
		{method: "GET", path: "periodic?recent=5", check: has("at", "schedules")},
		{method: "POST", path: fmt.Sprintf("failed/%d/retry", ids["ann"]), operate: true, check: has("failed_id", "job_id")},
		{method: "POST", path: "failed/retry?search=cyd", operate: true, check: func(t *testing.T, a answer) {
			if a.body["retried"] != 1.0 {
				t.Errorf("retry all: %s", a.raw)
			}
		}},
		{method: "DELETE", path: fmt.Sprintf("failed/%d", ids["bob"]), operate: true, check: has("forgotten")},
		{method: "POST", path: "pause", body: `{"supervisor": "default"}`, operate: true, check: has("paused")},
		{method: "POST", path: "continue", body: `{"supervisor": "default"}`, operate: true, check: has("continued")},
		{method: "POST", path: "pause", body: `{"queue": "mail"}`, operate: true, check: has("paused")},
		{method: "POST", path: "continue", body: `{"queue": "mail"}`, operate: true, check: has("continued")},
		{method: "POST", path: "pause", operate: true, check: has("paused")},
		{method: "POST", path: "continue", operate: true, check: has("continued")},
		{method: "POST", path: "queues/mail/clear", operate: true, check: func(t *testing.T, a answer) {
			if a.body["deleted"] != 2.0 || len(a.body) != 1 {
				t.Errorf("clear mail (dan's and eve's jobs): %s", a.raw)
			}
		}},
	}
	for _, c := range calls {
		name := c.method + " " + c.path
		a := b.do(t, c.method, c.path, "", c.body)
		if a.code != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" || !strings.Contains(a.raw, "no token") {
			t.Errorf("%s without a token: %d %s", name, a.code, a.raw)
		}
		for _, tok := range []string{b.revoked, b.expired, "fleet_0123456789abcdef_nope", "not-a-token"} {
			if a := b.do(t, c.method, c.path, tok, c.body); a.code != http.StatusUnauthorized {
				t.Errorf("%s with a refused token: %d %s", name, a.code, a.raw)
			}
		}
		a = b.do(t, c.method, c.path, b.view, c.body)
		if c.operate {
			if a.code != http.StatusForbidden || !strings.Contains(a.raw, "operate") {
				t.Errorf("%s with a view token: %d %s", name, a.code, a.raw)
			}
		} else {
			if a.code != http.StatusOK {
				t.Errorf("%s with a view token: %d %s", name, a.code, a.raw)
			} else {
				c.check(t, a)
			}
		}
		a = b.do(t, c.method, c.path, b.operate, c.body)
		if a.code != http.StatusOK {
			t.Errorf("%s with an operate token: %d %s", name, a.code, a.raw)
		} else if c.operate {
			c.check(t, a)
		}
	}
	// The operate calls did what they said.
	left, err := b.svc.FailedJobs(t.Context(), fleet.FailedFilter{})
	if err != nil || len(left) != 1 || left[0].ID != b.hostileFailed {
		t.Errorf("failed jobs left after retry, retry all and forget: %+v %v", left, err)
	}
	if p, err := b.svc.PausedState(t.Context()); err != nil || p.All || len(p.Supervisors)+len(p.Queues) != 0 {
		t.Errorf("paused after pause and continue: %+v %v", p, err)
	}
}

// TestDashboardAPIRefusals: why a token is refused is said; revoked and
// expired tokens are 401; bad parameters are 400 naming the parameter;
// unknown routes 404 JSON; a wrong method 405.
func TestDashboardAPIRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	for tok, want := range map[string]string{b.revoked: "revoked", b.expired: "expired", "fleet_0123456789abcdef_nope": "unknown token"} {
		if a := b.do(t, "GET", "overview", tok, ""); a.code != http.StatusUnauthorized || !strings.Contains(a.raw, want) {
			t.Errorf("token refused for %s: %d %s", want, a.code, a.raw)
		}
	}
	for _, tc := range []struct{ method, path, body, param string }{
		{"GET", "jobs?status=done", "", "status"},
		{"GET", "jobs?page=0", "", "page"},
		{"GET", "jobs?page=abc", "", "page"},
		{"GET", "jobs?page=1&page=2", "", "page"},
		{"GET", "jobs?queue=", "", "queue"},
		{"GET", "jobs?state=running", "", "state"},
		{"GET", "jobs?state=", "", "state"},
		{"GET", "jobs?status=completed&state=pending", "", "state"},
		{"GET", "jobs?limit=5", "", "limit"},
		{"GET", "jobs/abc", "", "id"},
		{"GET", "jobs/0", "", "id"},
		{"GET", "failed?page=-1", "", "page"},
		{"GET", "failed?queue=%00", "", "queue"},
		{"GET", "failed/x", "", "id"},
		{"GET", "overview?x=1", "", "x"},
		{"GET", "metrics?period=year", "", "period"},
		{"GET", "metrics?queue=a&job=b", "", "job"},
		{"GET", "periodic?recent=-1", "", "recent"},
		{"GET", "periodic?recent=101", "", "recent"},
		{"GET", "periodic?recent=x", "", "recent"},
		{"POST", "failed/0/retry", "", "id"},
		{"DELETE", "failed/-3", "", "id"},
		{"POST", "pause", `{"supervisor": 1}`, "body"},
		{"POST", "pause", `{"nope": "x"}`, "body"},
		{"POST", "pause", `{"supervisor": "a", "queue": "b"}`, "body"},
		{"POST", "pause", `{"supervisor": ""}`, "supervisor"},
		{"POST", "continue", `{"queue": " "}`, "queue"},
		{"POST", "continue", `[1]`, "body"},
	} {
		a := b.do(t, tc.method, tc.path, b.operate, tc.body)
		if a.code != http.StatusBadRequest || a.body["parameter"] != tc.param || !strings.Contains(a.body["error"].(string), tc.param) {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", tc.method, tc.path, tc.body, a.code, a.raw, tc.param)
		}
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "nope"}, {"GET", ""}, {"GET", "jobs/1/x"}, {"GET", "jobs/999999"}, {"GET", "failed/999999"},
		{"POST", "failed/999999/retry"}, {"DELETE", "failed/999999"},
	} {
		if a := b.do(t, tc.method, tc.path, b.operate, ""); a.code != http.StatusNotFound || a.body["error"] == nil {
			t.Errorf("%s %s: %d %s, want 404 JSON", tc.method, tc.path, a.code, a.raw)
		}
	}
	if a := b.do(t, "GET", "pause", b.operate, ""); a.code != http.StatusMethodNotAllowed || a.header.Get("Allow") != "POST" {
		t.Errorf("GET pause: %d %s allow %q", a.code, a.raw, a.header.Get("Allow"))
	}
	// A pause of a supervisor no live master runs is refused, and stored
	// nowhere.
	if a := b.do(t, "POST", "pause", b.operate, `{"supervisor": "nosuch"}`); a.code != http.StatusNotFound || !strings.Contains(a.raw, `no such supervisor named \"nosuch\"`) {
		t.Errorf("pause of an unknown supervisor: %d %s, want 404", a.code, a.raw)
	}
	if p, err := b.svc.PausedState(t.Context()); err != nil || slices.Contains(p.Supervisors, "nosuch") {
		t.Errorf("paused after the refused pause: %+v, %v", p, err)
	}
	// Resuming one supervisor while every one is paused says so.
	if a := b.do(t, "POST", "pause", b.operate, ""); a.code != http.StatusOK {
		t.Fatal(a.raw)
	}
	if a := b.do(t, "POST", "continue", b.operate, `{"supervisor": "default"}`); a.code != http.StatusConflict || !strings.Contains(a.raw, "every supervisor is paused") {
		t.Errorf("continue one while all are paused: %d %s", a.code, a.raw)
	}
}

// TestDashboardAuthenticator: an app's own authenticator decides instead of
// tokens; ErrUnauthenticated is 401, no view 403, another error 500.
func TestDashboardAuthenticator(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{Path: "/admin/fleet", Authenticate: func(r *http.Request) ([]fleet.Ability, error) {
		switch r.Header.Get("X-Role") {
		case "admin":
			return []fleet.Ability{fleet.AbilityView, fleet.AbilityOperate}, nil
		case "viewer":
			return []fleet.Ability{fleet.AbilityView}, nil
		case "nobody":
			return nil, nil
		case "broken":
			return nil, errors.New("session store down")
		}
		return nil, fmt.Errorf("%w: sign in first", dashboard.ErrUnauthenticated)
	}})
	send := func(method, path, role string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, b.base+"/api/"+path, nil)
		req.Header.Set("X-Role", role)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tc := range []struct {
		method, path, role string
		code               int
	}{
		{"GET", "overview", "", 401}, {"GET", "overview", "nobody", 403}, {"GET", "overview", "viewer", 200},
		{"POST", "pause", "viewer", 403}, {"POST", "pause", "admin", 200}, {"GET", "workload", "broken", 500},
	} {
		if code, raw := send(tc.method, tc.path, tc.role); code != tc.code || strings.Contains(raw, "session store") {
			t.Errorf("%s %s as %q: %d %s, want %d", tc.method, tc.path, tc.role, code, raw, tc.code)
		}
	}
	// The fleet's own tokens mean nothing to it.
	if a := b.do(t, "GET", "overview", b.operate, ""); a.code != http.StatusUnauthorized {
		t.Errorf("a fleet token under an app's authenticator: %d", a.code)
	}
}

// TestDashboardPage: the page and its assets are public and hold no data;
// assets are named by their content and cached for a year; the policy
// allows no inline code and no framing.
func TestDashboardPage(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(b.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	var assets []string
	for _, path := range []string{"", "/"} {
		resp, page := get(path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("page %q: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if csp == "" || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			!strings.Contains(csp, "script-src 'self'") {
			t.Errorf("content security policy: %q", csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Error("page without nosniff")
		}
		for _, leak := range []string{secret, "mail.send", b.masterName, "<script>alert", "style="} {
			if strings.Contains(page, leak) {
				t.Errorf("the page holds %q", leak)
			}
		}
		if strings.Contains(page, "<script>") || strings.Contains(page, "onclick") {
			t.Error("the page has inline script")
		}
		assets = assets[:0]
		for _, part := range strings.Split(page, `"`) {
			if strings.HasPrefix(part, "/_fleet/assets/fleet-") {
				assets = append(assets, part)
			}
		}
	}
	if len(assets) != 2 {
		t.Fatalf("assets linked from the page: %v", assets)
	}
	for _, a := range assets {
		resp, body := get(strings.TrimPrefix(a, "/_fleet"))
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || len(body) < 1000 {
			t.Errorf("asset %s: %d %q, %d bytes", a, resp.StatusCode, resp.Header.Get("Cache-Control"), len(body))
		}
		if strings.HasSuffix(a, ".js") && (resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || strings.Contains(body, "innerHTML") || strings.Contains(body, "eval(")) {
			t.Errorf("script %s: %s, or it writes HTML", a, resp.Header.Get("Content-Type"))
		}
	}
	if resp, _ := get("/assets/fleet-0000000000000000.js"); resp.StatusCode != 404 || resp.Header.Get("Cache-Control") == "public, max-age=31536000, immutable" {
		t.Errorf("a stale asset name: %d %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	if resp, _ := get("/nothing"); resp.StatusCode != 404 {
		t.Errorf("an unknown page: %d", resp.StatusCode)
	}
}

// TestDashboardJobStates: pending jobs are filtered by state, alone and
// with a queue; reserved is the running one.
func TestDashboardJobStates(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ctx := t.Context()
	c := queue.NewClient(b.pool, queue.Defaults{})
	laterRes, err := c.Dispatch(ctx, queue.NewJob("mail.send", nil).OnQueue("mail").Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	later := laterRes.ID
	if _, err := b.pool.Exec(ctx, `UPDATE queue_jobs SET reserved_by = 'w-1', reserved_at = now() WHERE id = $1`, b.pendingJobID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query string
		want  []int64
		n     int // when want is nil: how many
	}{
		{query: "state=delayed", want: []int64{later}},
		{query: "state=delayed&queue=mail", want: []int64{later}},
		{query: "state=delayed&queue=default", want: []int64{}},
		{query: "state=reserved", want: []int64{b.pendingJobID}},
		{query: "state=reserved&queue=mail", want: []int64{b.pendingJobID}},
		{query: "state=limited", want: []int64{}},
		{query: "state=pending", n: 2},
		{query: "state=pending&queue=mail", n: 1},
	} {
		a := b.do(t, "GET", "jobs?"+tc.query, b.view, "")
		js, _ := a.body["jobs"].([]any)
		if a.code != http.StatusOK {
			t.Errorf("%s: %d %s", tc.query, a.code, a.raw)
			continue
		}
		state := strings.TrimPrefix(strings.SplitN(tc.query, "&", 2)[0], "state=")
		var got []int64
		for _, j := range js {
			m := j.(map[string]any)
			got = append(got, int64(m["id"].(float64)))
			if m["state"] != state {
				t.Errorf("%s: a job in state %v: %s", tc.query, m["state"], a.raw)
			}
		}
		if a.body["state"] != state {
			t.Errorf("%s: the answer's state is %v", tc.query, a.body["state"])
		}
		if tc.want != nil && !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s: jobs %v, want %v", tc.query, got, tc.want)
		}
		if tc.want == nil && len(got) != tc.n {
			t.Errorf("%s: %d jobs, want %d: %v", tc.query, len(got), tc.n, got)
		}
	}
}
