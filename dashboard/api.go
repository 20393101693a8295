package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/queue"
)

// perPage is the size of a page of the jobs and failed lists.
const perPage = 50

// maxPage bounds the page parameter (an offset of 5 million rows).
const maxPage = 100_000

// apiTimeout bounds the database work of one API request.
const apiTimeout = 30 * time.Second

// route is one API route: its http.ServeMux pattern (a method and a path
// below api/, with {name} wildcards), the ability it needs ("" for any
// caller the authenticator accepts), the query parameters it takes, and
// what it does.
type route struct {
	pattern string
	ability fleet.Ability
	params  []string
	serve   func(ctx context.Context, c *call) (int, any, error)
}

// call is one API request being served; r carries the route's wildcards
// (r.PathValue).
type call struct {
	r         *http.Request
	query     url.Values
	abilities []fleet.Ability
}

// apiError is an answer other than 200 with a message, and the parameter
// at fault for a 400.
type apiError struct {
	code  int
	msg   string
	param string
}

func (e *apiError) Error() string { return e.msg }

func badParam(param, format string, args ...any) error {
	return &apiError{code: http.StatusBadRequest, msg: param + ": " + fmt.Sprintf(format, args...), param: param}
}

func notFound(format string, args ...any) error {
	return &apiError{code: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

func (h *Handler) apiRoutes() []route {
	view, operate := fleet.AbilityView, fleet.AbilityOperate
	return []route{
		{pattern: "GET /me", serve: h.me},
		{pattern: "GET /overview", ability: view, serve: h.overview},
		{pattern: "GET /workload", ability: view, serve: h.workload},
		{pattern: "GET /masters", ability: view, serve: h.masters},
		{pattern: "GET /jobs", ability: view, params: []string{"status", "queue", "tag", "state", "page"}, serve: h.jobs},
		{pattern: "GET /jobs/{id}", ability: view, serve: h.job},
		{pattern: "POST /jobs/{id}/cancel", ability: operate, serve: h.cancel},
		{pattern: "GET /failed", ability: view, params: []string{"search", "queue", "tag", "page"}, serve: h.failedList},
		{pattern: "POST /failed/retry", ability: operate, params: []string{"search", "queue", "tag"}, serve: h.retryAll},
		{pattern: "GET /failed/{id}", ability: view, serve: h.failedJob},
		{pattern: "DELETE /failed/{id}", ability: operate, serve: h.forget},
		{pattern: "POST /failed/{id}/retry", ability: operate, serve: h.retry},
		{pattern: "GET /metrics", ability: view, params: []string{"period", "queue", "job"}, serve: h.metrics},
		{pattern: "GET /periodic", ability: view, params: []string{"recent"}, serve: h.periodic},
		{pattern: "POST /pause", ability: operate, serve: h.pause},
		{pattern: "POST /continue", ability: operate, serve: h.resume},
		{pattern: "POST /queues/{queue}/clear", ability: operate, serve: h.clearQueue},
	}
}

// apiMux routes the API's paths (below api/, from "/") to its routes. A
// GET route takes HEAD too.
func (h *Handler) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range h.apiRoutes() {
		mux.Handle(rt.pattern, h.routeHandler(rt))
	}
	return mux
}

// abilitiesKey carries the abilities the authenticator granted from
// serveAPI to the route's handler.
type abilitiesKey struct{}

// serveAPI authenticates and routes through the API's mux; a request no
// route takes is answered 405 naming the methods its path allows, or 404,
// in JSON, never cached. The route's handler does the rest (routeHandler).
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request, path string) {
	w.Header().Set("Cache-Control", "no-store")
	abilities, err := h.auth(r)
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fleet"`)
			h.writeJSON(w, http.StatusUnauthorized, errorBody(err.Error(), ""))
			return
		}
		h.log.Error("dashboard: authenticate a request", "logger", "fleet", "path", r.URL.Path, "err", err)
		h.writeJSON(w, http.StatusInternalServerError, errorBody("the request could not be authenticated (see the server's log)", ""))
		return
	}
	// The mux sees the API path from "/", its segments still escaped, so
	// that a wildcard such as {queue} may hold a "/" (as %2F); it
	// unescapes each wildcard. A path the mux would redirect to its clean
	// form (an empty segment, a trailing slash, dot segments) names no
	// route.
	raw := "/" + h.rawAPIPath(r, path)
	if pathpkg.Clean(raw) != raw {
		h.writeJSON(w, http.StatusNotFound, errorBody(fmt.Sprintf("no API route %s /%s", r.Method, path), ""))
		return
	}
	u := *r.URL
	u.Path, u.RawPath = "/"+path, ""
	if raw != u.Path {
		u.RawPath = raw
	}
	ar := r.WithContext(context.WithValue(r.Context(), abilitiesKey{}, abilities))
	ar.URL = &u
	miss, pattern := h.api.Handler(ar)
	if pattern != "" {
		h.api.ServeHTTP(w, ar)
		return
	}
	// No route: the mux's own answer says whether the path has routes for
	// other methods (405 and Allow), and this one says it in JSON.
	rec := &missRecorder{header: http.Header{}}
	miss.ServeHTTP(rec, ar)
	if allow := rec.header.Get("Allow"); rec.code == http.StatusMethodNotAllowed && allow != "" {
		w.Header().Set("Allow", allow)
		h.writeJSON(w, http.StatusMethodNotAllowed, errorBody(fmt.Sprintf("%s is not allowed here (allowed: %s)", r.Method, allow), ""))
		return
	}
	h.writeJSON(w, http.StatusNotFound, errorBody(fmt.Sprintf("no API route %s /%s", r.Method, path), ""))
}

// missRecorder keeps the status and headers of the mux's answer to a
// request no route takes, and drops its plain-text body.
type missRecorder struct {
	header http.Header
	code   int
}

func (m *missRecorder) Header() http.Header { return m.header }

func (m *missRecorder) Write(b []byte) (int, error) {
	m.WriteHeader(http.StatusOK)
	return len(b), nil
}

func (m *missRecorder) WriteHeader(code int) {
	if m.code == 0 {
		m.code = code
	}
}

// routeHandler checks the caller's ability and the query parameters for
// rt, serves it within apiTimeout and answers JSON.
func (h *Handler) routeHandler(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		abilities, _ := r.Context().Value(abilitiesKey{}).([]fleet.Ability)
		if !slices.Contains(abilities, fleet.AbilityView) || (rt.ability != "" && !slices.Contains(abilities, rt.ability)) {
			need := rt.ability
			if need == "" || !slices.Contains(abilities, fleet.AbilityView) {
				need = fleet.AbilityView
			}
			h.writeJSON(w, http.StatusForbidden, errorBody(fmt.Sprintf("this needs the %s ability, which the token lacks", need), ""))
			return
		}
		query, err := url.ParseQuery(r.URL.RawQuery)
		if err == nil {
			err = checkParams(query, rt.params)
		} else {
			err = badParam("query", "%v", err)
		}
		if err != nil {
			h.answerError(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
		defer cancel()
		code, body, err := rt.serve(ctx, &call{r: r, query: query, abilities: abilities})
		if err != nil {
			h.answerError(w, r, err)
			return
		}
		h.writeJSON(w, code, body)
	})
}

// rawAPIPath is path (the API path, decoded) as the request spelled it,
// its segments still escaped. It is path itself when the two do not line
// up.
func (h *Handler) rawAPIPath(r *http.Request, path string) string {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), (&url.URL{Path: h.path}).EscapedPath()+"/api")
	if !ok {
		return path
	}
	rest = strings.TrimPrefix(rest, "/")
	if p, err := url.PathUnescape(rest); err != nil || p != path {
		return path
	}
	return rest
}

// checkParams refuses parameters the route does not take, and repeated
// ones.
func checkParams(q url.Values, allowed []string) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return badParam(k, "unknown parameter (this route takes none)")
			}
			return badParam(k, "unknown parameter (this route takes %s)", strings.Join(allowed, ", "))
		}
		if len(q[k]) > 1 {
			return badParam(k, "given %d times, take it once", len(q[k]))
		}
	}
	return nil
}

func errorBody(msg, param string) map[string]string {
	b := map[string]string{"error": msg}
	if param != "" {
		b["parameter"] = param
	}
	return b
}

// answerError answers an apiError as it says, a not-found error of the
// service 404, and anything else 500 (logged; the body says no more).
func (h *Handler) answerError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		h.writeJSON(w, ae.code, errorBody(ae.msg, ae.param))
	case errors.Is(err, fleet.ErrFailedJobNotFound), errors.Is(err, fleet.ErrJobNotFound):
		h.writeJSON(w, http.StatusNotFound, errorBody(err.Error(), ""))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The caller went away; nobody reads an answer.
	default:
		h.log.Error("dashboard: API request failed", "logger", "fleet", "method", r.Method, "path", r.URL.Path, "err", err)
		h.writeJSON(w, http.StatusInternalServerError, errorBody("the request failed (see the server's log)", ""))
	}
}

// writeJSON writes body as JSON (with <, > and & escaped) with code.
func (h *Handler) writeJSON(w http.ResponseWriter, code int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		h.log.Error("dashboard: encode an answer", "logger", "fleet", "err", err)
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// page reads the page parameter: a whole number from 1 (default 1).
func (c *call) page() (int, error) {
	s := c.query.Get("page")
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPage {
		return 0, badParam("page", "must be a whole number from 1 to %d, got %q", maxPage, s)
	}
	return n, nil
}

// queue reads the queue parameter, checked as queue names are.
func (c *call) queue() (string, error) {
	q, ok := c.query["queue"]
	if !ok {
		return "", nil
	}
	if err := queue.CheckQueue("queue", q[0]); err != nil {
		return "", badParam("queue", "%v", strings.TrimPrefix(err.Error(), "queue "))
	}
	return q[0], nil
}

// tag reads the tag filter: a job's tag, exactly ("" when not given).
func (c *call) tag() (string, error) {
	t, ok := c.query["tag"]
	if !ok {
		return "", nil
	}
	if err := queue.CheckTags("tag", t[:1]); err != nil {
		return "", badParam("tag", "%v", strings.TrimPrefix(err.Error(), "tag[0] "))
	}
	return t[0], nil
}

// state reads the state filter of pending jobs: one of
// fleet.QueuedStates ("" when not given).
func (c *call) state() (string, error) {
	s, ok := c.query["state"]
	if !ok {
		return "", nil
	}
	if !slices.Contains(fleet.QueuedStates, s[0]) {
		return "", badParam("state", "must be one of %s, got %q", strings.Join(fleet.QueuedStates, ", "), s[0])
	}
	return s[0], nil
}

// id reads the path's {id}: a positive whole number.
func (c *call) id(what string) (int64, error) {
	s := c.r.PathValue("id")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, badParam("id", "%s id must be a positive whole number, got %q", what, s)
	}
	return n, nil
}

// maxRecentTicks bounds the recent parameter of the periodic route.
const maxRecentTicks = 100

// periodic lists the app's periodic schedules (the Service's), those of
// its configuration and of its code, then those only the database knows;
// recent adds each one's latest dispatched ticks.
func (h *Handler) periodic(ctx context.Context, c *call) (int, any, error) {
	recent := 0
	if s, ok := c.query["recent"]; ok {
		n, err := strconv.Atoi(s[0])
		if err != nil || n < 0 || n > maxRecentTicks {
			return 0, nil, badParam("recent", "must be a whole number from 0 to %d, got %q", maxRecentTicks, s[0])
		}
		recent = n
	}
	v, err := h.svc.Periodic(ctx, h.svc.PeriodicSchedules(), recent)
	if err != nil {
		return 0, nil, err
	}
	if v.Schedules == nil {
		v.Schedules = []fleet.PeriodicSchedule{}
	}
	return http.StatusOK, v, nil
}

func (h *Handler) me(_ context.Context, c *call) (int, any, error) {
	return http.StatusOK, map[string]any{"abilities": c.abilities}, nil
}

func (h *Handler) overview(ctx context.Context, _ *call) (int, any, error) {
	o, err := h.svc.Overview(ctx)
	return http.StatusOK, o, err
}

func (h *Handler) workload(ctx context.Context, _ *call) (int, any, error) {
	loads, err := h.svc.Workload(ctx)
	if err != nil {
		return 0, nil, err
	}
	paused, err := h.svc.PausedState(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"queues": loads, "paused": paused}, nil
}

func (h *Handler) masters(ctx context.Context, _ *call) (int, any, error) {
	v, err := h.svc.Masters(ctx, false)
	if err != nil {
		return 0, nil, err
	}
	paused, err := h.svc.PausedState(ctx)
	if err != nil {
		return 0, nil, err
	}
	type master struct {
		fleet.Master
		Processes int64 `json:"processes"`
	}
	out := make([]master, len(v.Masters))
	for i, m := range v.Masters {
		out[i] = master{m, fleet.MasterProcesses(m)}
	}
	return http.StatusOK, map[string]any{"at": v.At, "masters": out, "paused": paused}, nil
}

func (h *Handler) jobs(ctx context.Context, c *call) (int, any, error) {
	status := c.query.Get("status")
	if _, ok := c.query["status"]; !ok {
		status = "pending"
	}
	if status != "pending" && status != "completed" {
		return 0, nil, badParam("status", "must be pending or completed, got %q", status)
	}
	page, err := c.page()
	if err != nil {
		return 0, nil, err
	}
	q, err := c.queue()
	if err != nil {
		return 0, nil, err
	}
	tag, err := c.tag()
	if err != nil {
		return 0, nil, err
	}
	if tag != "" && status != "pending" {
		return 0, nil, badParam("tag", "filters pending jobs only (status=pending)")
	}
	state, err := c.state()
	if err != nil {
		return 0, nil, err
	}
	if state != "" && status != "pending" {
		return 0, nil, badParam("state", "filters pending jobs only (status=pending)")
	}
	p := fleet.Page{Queue: q, Tag: tag, State: state, Limit: perPage + 1, Offset: (page - 1) * perPage}
	var jobs any
	more := false
	if status == "pending" {
		list, err := h.svc.PendingJobs(ctx, p)
		if err != nil {
			return 0, nil, err
		}
		more, list = len(list) > perPage, list[:min(len(list), perPage)]
		jobs = list
	} else {
		list, err := h.svc.CompletedJobs(ctx, p)
		if err != nil {
			return 0, nil, err
		}
		more, list = len(list) > perPage, list[:min(len(list), perPage)]
		jobs = list
	}
	return http.StatusOK, map[string]any{"status": status, "queue": q, "tag": tag, "state": state, "page": page, "per_page": perPage, "has_more": more, "jobs": jobs}, nil
}

func (h *Handler) job(ctx context.Context, c *call) (int, any, error) {
	id, err := c.id("a job's")
	if err != nil {
		return 0, nil, err
	}
	s, err := h.svc.Job(ctx, id)
	if errors.Is(err, fleet.ErrJobNotFound) {
		return 0, nil, notFound("no job with id %d", id)
	}
	return http.StatusOK, s, err
}

// cancel cancels a queued job: at once when no worker holds it, else its
// worker is asked to stop it (the answer's outcome says which).
func (h *Handler) cancel(ctx context.Context, c *call) (int, any, error) {
	id, err := c.id("a job's")
	if err != nil {
		return 0, nil, err
	}
	outcome, err := h.svc.CancelJob(fleet.WithActor(ctx, "the dashboard"), id)
	if errors.Is(err, fleet.ErrJobNotFound) {
		return 0, nil, notFound("no queued job with id %d (finished, failed or cancelled already?)", id)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"id": id, "outcome": outcome}, nil
}

// failedFilter reads search, queue and tag.
func (c *call) failedFilter() (fleet.FailedFilter, error) {
	q, err := c.queue()
	if err != nil {
		return fleet.FailedFilter{}, err
	}
	search := c.query.Get("search")
	if len(search) > 1000 {
		return fleet.FailedFilter{}, badParam("search", "must be at most 1000 bytes, got %d", len(search))
	}
	tag, err := c.tag()
	if err != nil {
		return fleet.FailedFilter{}, err
	}
	return fleet.FailedFilter{Search: search, Queue: q, Tag: tag}, nil
}

func (h *Handler) failedList(ctx context.Context, c *call) (int, any, error) {
	f, err := c.failedFilter()
	if err != nil {
		return 0, nil, err
	}
	page, err := c.page()
	if err != nil {
		return 0, nil, err
	}
	total, err := h.svc.FailedCount(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	f.Limit, f.Offset = perPage, (page-1)*perPage
	jobs, err := h.svc.FailedJobs(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{
		"queue": f.Queue, "page": page, "per_page": perPage, "total": total, "jobs": jobs,
	}, nil
}

func (h *Handler) failedJob(ctx context.Context, c *call) (int, any, error) {
	id, err := c.id("a failed job's")
	if err != nil {
		return 0, nil, err
	}
	s, err := h.svc.FailedJobStory(ctx, id)
	if errors.Is(err, fleet.ErrFailedJobNotFound) {
		return 0, nil, notFound("no failed job with id %d", id)
	}
	return http.StatusOK, s, err
}

func (h *Handler) retry(ctx context.Context, c *call) (int, any, error) {
	id, err := c.id("a failed job's")
	if err != nil {
		return 0, nil, err
	}
	newID, err := h.svc.Retry(ctx, id)
	if errors.Is(err, fleet.ErrFailedJobNotFound) {
		return 0, nil, notFound("no failed job with id %d (retried or forgotten already?)", id)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int64{"failed_id": id, "job_id": newID}, nil
}

func (h *Handler) retryAll(ctx context.Context, c *call) (int, any, error) {
	f, err := c.failedFilter()
	if err != nil {
		return 0, nil, err
	}
	n, err := h.svc.RetryAll(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int{"retried": n}, nil
}

func (h *Handler) forget(ctx context.Context, c *call) (int, any, error) {
	id, err := c.id("a failed job's")
	if err != nil {
		return 0, nil, err
	}
	if err := h.svc.Forget(ctx, id); errors.Is(err, fleet.ErrFailedJobNotFound) {
		return 0, nil, notFound("no failed job with id %d (retried or forgotten already?)", id)
	} else if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int64{"forgotten": id}, nil
}

// clearQueue deletes the jobs of the path's {queue} that no worker holds
// (see fleet.Service.Clear) and answers how many. It runs within the API's
// timeout; a queue too large for it is cleared with fleet:clear.
func (h *Handler) clearQueue(ctx context.Context, c *call) (int, any, error) {
	q := c.r.PathValue("queue")
	if err := queue.CheckQueue("queue", q); err != nil {
		return 0, nil, badParam("queue", "%v", strings.TrimPrefix(err.Error(), "queue "))
	}
	n, err := h.svc.Clear(ctx, q)
	if err != nil {
		return 0, nil, fmt.Errorf("clear queue %q (deleted %d job(s) before the error): %w", q, n, err)
	}
	return http.StatusOK, map[string]int{"deleted": n}, nil
}

// metricsSpan mirrors the service's periods: how far back, and the bucket.
var metricsSpan = map[fleet.Period][2]time.Duration{
	fleet.PeriodHour: {time.Hour, time.Minute},
	fleet.PeriodDay:  {24 * time.Hour, 15 * time.Minute},
	fleet.PeriodWeek: {7 * 24 * time.Hour, time.Hour},
}

func (h *Handler) metrics(ctx context.Context, c *call) (int, any, error) {
	ps := c.query.Get("period")
	if _, ok := c.query["period"]; !ok {
		ps = "hour"
	}
	period, err := fleet.ParsePeriod(ps)
	if err != nil {
		return 0, nil, badParam("period", "must be hour, day or week, got %q", ps)
	}
	_, byQueue := c.query["queue"]
	_, byJob := c.query["job"]
	if byQueue && byJob {
		return 0, nil, badParam("job", "give queue or job, not both")
	}
	kind, subject := "", ""
	if byQueue {
		if subject, err = c.queue(); err != nil {
			return 0, nil, err
		}
		kind = "queue"
	}
	if byJob {
		subject = c.query.Get("job")
		if err := queue.CheckName("job", subject); err != nil {
			return 0, nil, badParam("job", "%v", strings.TrimPrefix(err.Error(), "job "))
		}
		kind = "job"
	}
	at := time.Now()
	rows, err := h.svc.Metrics(ctx, period)
	if err != nil {
		return 0, nil, err
	}
	queues, jobs := []string{}, []string{}
	kept := []fleet.MetricsRow{}
	for _, r := range rows {
		names := &queues
		if r.Kind == "job" {
			names = &jobs
		}
		if !slices.Contains(*names, r.Subject) {
			*names = append(*names, r.Subject)
		}
		if kind == "" || (r.Kind == kind && r.Subject == subject) {
			kept = append(kept, r)
		}
	}
	slices.Sort(queues)
	slices.Sort(jobs)
	span := metricsSpan[period]
	return http.StatusOK, map[string]any{
		"period": period, "at": at, "span_secs": span[0].Seconds(), "bucket_secs": span[1].Seconds(),
		"kind": kind, "subject": subject, "queues": queues, "jobs": jobs, "rows": metricsPoints(kept, at, span[0], span[1]),
	}, nil
}

// metricsPoint is a bucket of the metrics answer. Observed false: no
// snapshot of the subject exists for the bucket (no master wrote one), and
// its figures are not zeros but unknown. Pending, WaitSecs and ClearSecs
// are null when the bucket's snapshots did not see their own backlog.
type metricsPoint struct {
	fleet.MetricsRow
	Observed  bool     `json:"observed"`
	Pending   *int64   `json:"pending"`
	WaitSecs  *float64 `json:"wait_secs"`
	ClearSecs *float64 `json:"clear_secs"`
}

// metricsGrace is how long after a bucket ends its snapshot may still be
// on its way: a later bucket without one is not yet a gap.
const metricsGrace = time.Minute

// metricsPoints gives each subject of rows a point for every bucket of
// [at-span, at] that ended metricsGrace before at, unobserved where it has
// no row, ordered like rows: by time, kind and subject.
func metricsPoints(rows []fleet.MetricsRow, at time.Time, span, bucket time.Duration) []metricsPoint {
	type key struct {
		t             int64
		kind, subject string
	}
	type subj struct{ kind, subject string }
	have := map[key]fleet.MetricsRow{}
	var subjects []subj
	for _, r := range rows {
		have[key{r.TakenAt.UnixNano(), r.Kind, r.Subject}] = r
		if s := (subj{r.Kind, r.Subject}); !slices.Contains(subjects, s) {
			subjects = append(subjects, s)
		}
	}
	slices.SortFunc(subjects, func(a, b subj) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.subject, b.subject))
	})
	var times []time.Time
	for t := at.Add(-span).Truncate(bucket); !t.Add(bucket + metricsGrace).After(at); t = t.Add(bucket) {
		times = append(times, t)
	}
	for _, r := range rows { // the bucket in progress, when it has rows
		if !slices.ContainsFunc(times, r.TakenAt.Equal) {
			times = append(times, r.TakenAt)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]metricsPoint, 0, len(times)*len(subjects))
	for _, t := range times {
		for _, s := range subjects {
			r, ok := have[key{t.UnixNano(), s.kind, s.subject}]
			if !ok {
				out = append(out, metricsPoint{MetricsRow: fleet.MetricsRow{TakenAt: t, Kind: s.kind, Subject: s.subject}})
				continue
			}
			p := metricsPoint{MetricsRow: r, Observed: true}
			if r.BacklogSeen {
				p.Pending, p.WaitSecs, p.ClearSecs = &r.Pending, &r.WaitSecs, r.ClearSecs
			}
			out = append(out, p)
		}
	}
	return out
}

// target is the body of pause and continue: a supervisor, a queue, or
// neither (every supervisor).
type target struct {
	Supervisor *string `json:"supervisor"`
	Queue      *string `json:"queue"`
}

// readTarget decodes the body: empty, {}, {"supervisor": "x"} or
// {"queue": "y"}.
func readTarget(r *http.Request) (target, error) {
	var t target
	b, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil {
		return t, badParam("body", "could not be read: %v", err)
	}
	if len(b) > 4096 {
		return t, badParam("body", "must be at most 4096 bytes")
	}
	if strings.TrimSpace(string(b)) == "" {
		return t, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, badParam("body", `must be {"supervisor": NAME}, {"queue": NAME} or empty: %v`, err)
	}
	if dec.More() {
		return t, badParam("body", "must hold one JSON object")
	}
	if t.Supervisor != nil && t.Queue != nil {
		return t, badParam("body", "give supervisor or queue, not both")
	}
	if t.Supervisor != nil {
		if err := queue.CheckQueue("supervisor", *t.Supervisor); err != nil {
			return t, badParam("supervisor", "%v", strings.TrimPrefix(err.Error(), "supervisor "))
		}
	}
	if t.Queue != nil {
		if err := queue.CheckQueue("queue", *t.Queue); err != nil {
			return t, badParam("queue", "%v", strings.TrimPrefix(err.Error(), "queue "))
		}
	}
	return t, nil
}

func (h *Handler) pause(ctx context.Context, c *call) (int, any, error) {
	return h.pauseOrContinue(ctx, c, "paused", h.svc.PauseQueue, h.svc.Pause)
}

func (h *Handler) resume(ctx context.Context, c *call) (int, any, error) {
	return h.pauseOrContinue(ctx, c, "continued", h.svc.ResumeQueue, h.svc.Resume)
}

func (h *Handler) pauseOrContinue(ctx context.Context, c *call, verb string, onQueue, onSupervisor func(context.Context, string) error) (int, any, error) {
	t, err := readTarget(c.r)
	if err != nil {
		return 0, nil, err
	}
	var what map[string]any
	switch {
	case t.Queue != nil:
		err, what = onQueue(ctx, *t.Queue), map[string]any{"queue": *t.Queue}
	case t.Supervisor != nil:
		err, what = onSupervisor(ctx, *t.Supervisor), map[string]any{"supervisor": *t.Supervisor}
	default:
		err, what = onSupervisor(ctx, ""), map[string]any{"all": true}
	}
	if errors.Is(err, fleet.ErrAllPaused) {
		return 0, nil, &apiError{code: http.StatusConflict, msg: err.Error()}
	}
	if errors.Is(err, fleet.ErrUnknownSupervisor) {
		return 0, nil, &apiError{code: http.StatusNotFound, msg: err.Error()}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{verb: what}, nil
}
