package faults_test

// Several masters on one database, as real processes: the membership rules
// of master/master.go and membership/membership.go (liveness on the
// database clock, fenced claims, trust after a whole ttl, the row beating
// as draining until the last child exits, a member row for a hand-run
// worker) checked by their invariants: every job ends with exactly one
// 'completed' history row, nothing is in queue_failed_jobs, and test.sleep
// ran each job once, or once more for each attempt recorded as 'lost'.
//
// The scenarios mostly wait: on sleeping jobs, on the database clock, on a
// frozen process. TestMultiMaster runs them side by side, each on its own
// database (see mmServer), whatever -parallel is (t.Run from several
// goroutines), so that they cost the suite about as much wall time as the
// longest of them, some 20 s.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/pgtest"
)

// The membership timing of every scenario: fleetEnv's ttl of 3 s, a beat
// every second (the default, below half the ttl).
const (
	mmTTL  = 3 * time.Second
	mmBeat = time.Second
)

func TestMultiMaster(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	srv := newMMServer(t)
	scenarios := []struct {
		name string
		run  func(*testing.T, *mmServer)
	}{
		{"DrainKeepsRunningJob", testDrainKeepsRunningJob},
		{"KilledMasterGoesOfflineAndItsJobsRunElsewhere", testKilledMaster},
		{"LingerShowsDraining", testLinger},
		{"FrozenMaster", func(t *testing.T, srv *mmServer) { testFrozen(t, srv, false) }},
		{"FrozenMasterAndChildren", func(t *testing.T, srv *mmServer) { testFrozen(t, srv, true) }},
		{"FrozenChild", testFrozenChild},
		{"TerminatedSessionsThenPause", testTerminatedSessions},
		{"SeveralSIGTERMs", testSeveralSIGTERMs},
		{"RecyclingUnderLoad", testRecyclingUnderLoad},
		{"CrashLoopingGroup", testCrashLoopingGroup},
		{"SIGTERMWithJobsPastTheirTimeout", testSIGTERMWithTimeouts},
		{"HandRunWorkerKeepsItsJob", testHandRunWorker},
		{"KilledChildsJobsRunElsewhereOnce", testKilledChild},
		{"ChildHangingBeforeReadyIsReplaced", testHangingChild},
		{"PoisonJobFailsAfterItsTriesOthersFlow", testPoisonJob},
		{"JobLongerThanTheTTLUnderAMasterRunsOnce", testLongJobUnderAMaster},
		{"MasterStartedWhileDatabaseIsDown", testMasterStartsWhileDatabaseIsDown},
		{"LockedMembershipTable", testLockedMembership},
		{"ConnectionCap", testConnectionCap},
		{"FrozenDatabaseStop", testFrozenDatabaseStop},
		{"DatabaseRestart", func(t *testing.T, _ *mmServer) { testDatabaseOutage(t, outageStop) }},
		{"DatabaseReadOnly", func(t *testing.T, _ *mmServer) { testDatabaseOutage(t, outageReadOnly) }},
		{"DatabaseFrozen", func(t *testing.T, _ *mmServer) { testDatabaseOutage(t, outageFreeze) }},
	}
	// At most mmParallel scenarios at once: each runs two or three masters
	// with their children, and all of them together on two cores made
	// every beat late.
	var wg sync.WaitGroup
	slots := make(chan struct{}, mmParallel)
	for _, s := range scenarios {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(s.name, func(t *testing.T) { s.run(t, srv) })
		})
	}
	wg.Wait()
}

// mmParallel is how many scenarios of TestMultiMaster run at once.
const mmParallel = 6

// mmServer gives each scenario a fresh migrated database. A scenario runs
// two or three processes of a few connections each, and all of them at
// once hold some 90: on a shared server with the default max_connections
// (100), which the rest of the suite nearly fills at its peak, that would
// fail other tests. So the scenarios run on a private cluster (package
// pgcluster), started by the first of them and removed after the last;
// without PostgreSQL's binaries they use pgtest's server, two at a time.
type mmServer struct {
	parent   *testing.T // TestMultiMaster, which outlives every scenario
	once     sync.Once
	err      error
	cluster  *privateCluster
	admin    *pgxpool.Pool
	template string
	shared   chan struct{} // bounds the scenarios on pgtest's server
}

func newMMServer(t *testing.T) *mmServer {
	srv := &mmServer{parent: t, template: "mm_template"}
	t.Cleanup(func() {
		if srv.admin != nil {
			srv.admin.Close()
		}
		if srv.cluster != nil {
			srv.cluster.remove()
		}
	})
	if _, err := pgcluster.FindBinaries(); err != nil {
		srv.shared = make(chan struct{}, 2)
	}
	return srv
}

// url returns the URL of a fresh migrated database for t alone.
func (srv *mmServer) url(t *testing.T) string {
	t.Helper()
	if srv.shared != nil {
		srv.shared <- struct{}{}
		t.Cleanup(func() { <-srv.shared })
		return pgtest.URL(t)
	}
	srv.once.Do(func() { srv.err = srv.start() })
	if srv.err != nil {
		t.Fatalf("private cluster for the multi-master tests: %v", srv.err)
	}
	name := "mm_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]))
	ctx := context.Background()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		_, err := srv.admin.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE `+srv.template)
		var pgErr *pgconn.PgError
		if err == nil {
			break
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || delay > time.Second {
			t.Fatalf("create database %s: %v", name, err)
		}
		time.Sleep(delay) // the template is being copied by another scenario
	}
	return srv.cluster.URL(name)
}

// start starts the private cluster and migrates the template every
// scenario's database is copied from.
func (srv *mmServer) start() error {
	c, err := startPrivateCluster()
	if err != nil {
		return err
	}
	srv.cluster = c
	if srv.admin, err = pgxpool.New(context.Background(), c.URL("postgres")); err != nil {
		return err
	}
	if _, err := srv.admin.Exec(context.Background(), `CREATE DATABASE `+srv.template); err != nil {
		return err
	}
	if r := apptest.Run(srv.parent, srv.parent.TempDir(), apptest.DBEnv(c.URL(srv.template)), "migrate"); r.Code != 0 {
		return fmt.Errorf("migrate: %+v", r)
	}
	return nil
}

// privateCluster is a throwaway PostgreSQL cluster in a directory of its
// own.
type privateCluster struct {
	*pgcluster.Cluster
	base string
	opts pgcluster.Options
}

// startPrivateCluster starts a cluster in a fresh directory, with opts
// changing its options (a port, settings).
func startPrivateCluster(opts ...func(*pgcluster.Options)) (*privateCluster, error) {
	base, err := os.MkdirTemp("", "fleet-mm-pg-")
	if err != nil {
		return nil, err
	}
	// As root the server runs as the postgres user, which must traverse it.
	if err := os.Chmod(base, 0o755); err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	c := &privateCluster{base: base, opts: pgcluster.Options{DataDir: filepath.Join(base, "data")}}
	for _, o := range opts {
		o(&c.opts)
	}
	if c.Cluster, err = pgcluster.Start(context.Background(), c.opts); err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	return c, nil
}

// restart starts the stopped server again on the same data directory (and
// so the same socket and URL).
func (c *privateCluster) restart() error {
	started, err := pgcluster.Start(context.Background(), c.opts)
	if err != nil {
		return err
	}
	c.Cluster = started
	return nil
}

// remove stops the server and removes its directory.
func (c *privateCluster) remove() {
	if c.Cluster != nil {
		_ = c.Stop(context.Background())
	}
	_ = os.RemoveAll(c.base)
}

// mmEnv is the environment of a master named name on url: one process
// running two jobs at once, unless extra says otherwise.
func mmEnv(url, name string, extra ...string) []string {
	return apptest.FleetEnv(url, append([]string{
		"APP_FLEET__NAME=" + name,
		"APP_FLEET__BEAT_INTERVAL_MS=" + strconv.Itoa(int(mmBeat/time.Millisecond)),
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=1",
	}, extra...)...)
}

// mmDB is a test's own connection pool to its database.
type mmDB struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func openDB(t *testing.T, url string) *mmDB {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &mmDB{t: t, pool: pool}
}

func (d *mmDB) count(sql string, args ...any) int {
	d.t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (d *mmDB) ids(sql string, args ...any) []int64 {
	d.t.Helper()
	rows, err := d.pool.Query(context.Background(), sql, args...)
	if err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	slices.Sort(ids)
	return ids
}

// now is the database clock.
func (d *mmDB) now() time.Time {
	d.t.Helper()
	var at time.Time
	if err := d.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&at); err != nil {
		d.t.Fatal(err)
	}
	return at
}

// member is a row of fleet_masters with the database's now() it was read at.
type member struct {
	At                           time.Time
	Instance, Kind, Name, State  string
	PID                          int
	StartedAt, BeatAt, ExpiresAt time.Time
}

func (m member) live() bool { return !m.ExpiresAt.Before(m.At) }

// trusted reports whether the member has beaten for a whole ttl and one
// beat more since it started: from then on it may release others' jobs.
func (m member) trusted() bool { return m.BeatAt.Sub(m.StartedAt) >= mmTTL+mmBeat }

// member reads the row of the member whose process is pid.
func (d *mmDB) member(pid int) (member, bool) {
	d.t.Helper()
	var m member
	err := d.pool.QueryRow(context.Background(), `
		SELECT now(), instance, kind, name, state, pid, started_at, beat_at, expires_at
		FROM fleet_masters WHERE pid = $1`, pid).
		Scan(&m.At, &m.Instance, &m.Kind, &m.Name, &m.State, &m.PID, &m.StartedAt, &m.BeatAt, &m.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return member{}, false
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return m, true
}

// waitMember waits for the row of a's process and returns it once cond
// holds for it.
func (d *mmDB) waitMember(a *apptest.App, within time.Duration, what string, cond func(member) bool) member {
	d.t.Helper()
	var m member
	apptest.Eventually(d.t, within, what, func() bool {
		var ok bool
		m, ok = d.member(a.PID())
		return ok && cond(m)
	})
	return m
}

// dispatchTo dispatches n test.sleep jobs of ms each to queue, with the
// dispatch command's extra flags, and returns the file their runs are
// recorded in (the same for every call in dir).
func dispatchTo(t *testing.T, url, dir, queue string, n, ms int, extra ...string) string {
	t.Helper()
	file := filepath.Join(dir, "runs.txt")
	payload, _ := json.Marshal(map[string]any{"ms": ms, "file": file})
	r := apptest.Run(t, dir, apptest.DBEnv(url), append([]string{"dispatch", "--name", "test.sleep", "--queue", queue,
		"--count", strconv.Itoa(n), "--payload", string(payload)}, extra...)...)
	if r.Code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	return file
}

// history is, per job, how many history rows it has of each status.
type history map[int64]map[string]int

// checkOutcomes checks the invariants on the test.sleep jobs (the jobs of
// every scenario but the poison job) once every job is done: nothing left
// in queue_jobs or queue_failed_jobs, nothing reserved, n jobs in the history each with
// exactly one 'completed' row and nothing but 'lost' rows besides (none
// unless allowLost), and a test.sleep run recorded for each once, plus at
// most one for each lost attempt (a lost holder may have finished its run
// after its job was released: its outcome was refused, but its run was
// recorded).
func checkOutcomes(t *testing.T, d *mmDB, file string, n int, allowLost bool) history {
	t.Helper()
	if k := d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.sleep'`); k != 0 {
		t.Errorf("%d jobs left in queue_jobs", k)
	}
	if k := d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`); k != 0 {
		t.Errorf("%d jobs still reserved", k)
	}
	if k := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name = 'test.sleep'`); k != 0 {
		t.Errorf("%d jobs in queue_failed_jobs", k)
	}
	h := readHistory(t, d)
	if len(h) != n {
		t.Errorf("%d jobs have history, want %d", len(h), n)
	}
	runs := apptest.ReadRuns(t, file)
	for id, st := range h {
		if st["completed"] != 1 {
			t.Errorf("job %d has %d 'completed' history rows: %v", id, st["completed"], st)
		}
		for s := range st {
			if s != "completed" && s != "lost" {
				t.Errorf("job %d has a %q history row: %v", id, s, st)
			}
		}
		if st["lost"] > 0 && !allowLost {
			t.Errorf("job %d was released from a live holder: %v", id, st)
		}
		if runs[id] < 1 || runs[id] > 1+st["lost"] {
			t.Errorf("job %d ran %d times, history %v", id, runs[id], st)
		}
	}
	for id := range runs {
		if h[id] == nil {
			t.Errorf("job %d ran but has no history", id)
		}
	}
	return h
}

// readHistory reads the history of the test.sleep jobs.
func readHistory(t *testing.T, d *mmDB) history {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `
		SELECT job_id, status, count(*)::int FROM fleet_jobs WHERE name = 'test.sleep' GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	h := history{}
	var id int64
	var status string
	var c int
	if _, err := pgx.ForEachRow(rows, []any{&id, &status, &c}, func() error {
		if h[id] == nil {
			h[id] = map[string]int{}
		}
		h[id][status] = c
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

// lost returns the jobs that have a 'lost' history row.
func (h history) lost() []int64 {
	var out []int64
	for id, st := range h {
		if st["lost"] > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// masters runs fleet:masters --json (with --all when all) and returns the
// view.
func masters(t *testing.T, url string, all bool) fleet.MastersView {
	t.Helper()
	args := []string{"fleet:masters", "--json"}
	if all {
		args = append(args, "--all")
	}
	r := apptest.Run(t, t.TempDir(), apptest.DBEnv(url), args...)
	if r.Code != 0 {
		t.Fatalf("fleet:masters: %+v", r)
	}
	var v fleet.MastersView
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("fleet:masters --json: %v\n%s", err, r.Stdout)
	}
	return v
}

func findMaster(v fleet.MastersView, instance string) (fleet.Master, bool) {
	for _, m := range v.Masters {
		if m.Instance == instance {
			return m, true
		}
	}
	return fleet.Master{}, false
}

// processes is how many processes a master reports running, stopping
// ones included.
func processes(t *testing.T, m fleet.Master) int {
	t.Helper()
	var sups []struct {
		Running int `json:"running"`
	}
	if len(m.Supervisors) == 0 {
		return 0
	}
	if err := json.Unmarshal(m.Supervisors, &sups); err != nil {
		t.Fatalf("supervisors of %s: %v: %s", m.Name, err, m.Supervisors)
	}
	n := 0
	for _, s := range sups {
		n += s.Running
	}
	return n
}

// waitExit waits for a to exit and returns its exit status.
func waitExit(t *testing.T, a *apptest.App, within time.Duration) int {
	t.Helper()
	select {
	case <-a.Done:
		return a.Cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("pid %d did not exit within %s", a.PID(), within)
		return -1
	}
}

// stopMasters sends SIGTERM to every app and checks that each exits 0.
func stopMasters(t *testing.T, apps ...*apptest.App) {
	t.Helper()
	var kids []int
	for _, a := range apps {
		kids = append(kids, apptest.Children(a.PID())...)
		_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, a := range apps {
		if code := waitExit(t, a, 20*time.Second); code != 0 {
			t.Errorf("pid %d exited %d after SIGTERM", a.PID(), code)
		}
	}
	// No child outlives its master by more than 2 s.
	if !apptest.Within(2*time.Second, func() bool { return !slices.ContainsFunc(kids, apptest.Alive) }) {
		t.Errorf("children still apptest.Alive 2 s after their masters exited: %v", slices.DeleteFunc(kids, func(pid int) bool { return !apptest.Alive(pid) }))
	}
}

// freeze sends SIGSTOP to each pid and waits until it is stopped; the
// test's end continues them, should it fail first. The first pid must
// stop; the others (a postmaster's backends, a master's children) may
// also have exited by then.
func freeze(t *testing.T, pids ...int) {
	t.Helper()
	for i, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			if i > 0 && errors.Is(err, syscall.ESRCH) {
				continue // exited since it was listed
			}
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	}
	// A process that was exiting when the signal came ends as a zombie
	// (its parent, stopped too, cannot reap it) or is gone: either way it
	// runs nothing.
	for i, pid := range pids {
		apptest.Eventually(t, 5*time.Second, fmt.Sprintf("pid %d stopped", pid), func() bool {
			s := apptest.ProcState(pid)
			return s == 'T' || s == 't' || (i > 0 && (s == 'Z' || s == 0))
		})
	}
}

func thaw(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("SIGCONT %d: %v", pid, err)
		}
	}
}

// testDrainKeepsRunningJob: master A, on SIGTERM, beats as draining until
// its child has finished the job it runs, and master B, trusted all the
// while, never releases that job. B works another queue, so that the job
// is A's; releasing is by member, whatever the queue.
func testDrainKeepsRunningJob(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	b := apptest.Start(t, dir, mmEnv(url, "b", "APP_FLEET__SUPERVISORS__WORK__QUEUES=other"), "fleet")
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	// b is trusted before the job starts, so that the whole 8 s of the job
	// (more than a ttl and a beat) fall in the drain however slow the
	// machine is.
	d.waitMember(b, 15*time.Second, "master b trusted", member.trusted)
	file := dispatchTo(t, url, dir, "default", 1, 8000)
	apptest.Eventually(t, 10*time.Second, "the job reserved under a", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 1
	})

	drainAt, began := d.now(), time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sawDraining := false
	for exited := false; !exited; {
		select {
		case <-a.Done:
			exited = true
		case <-time.After(50 * time.Millisecond):
		}
		if m, ok := d.member(a.PID()); ok && m.State == "draining" && m.live() {
			sawDraining = true
		}
		if !exited && time.Since(began) > apptest.Slack*30*time.Second {
			t.Fatalf("master a did not exit within %s of SIGTERM", apptest.Slack*30*time.Second)
		}
	}
	if code := a.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("master a exited %d", code)
	}
	if !sawDraining {
		t.Error("master a's row never showed draining while it stopped")
	}
	// a has exited: the job must be done by now, and a's row gone (leave).
	if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`); n != 1 {
		t.Fatalf("master a exited with %d completed attempts, want 1", n)
	}
	if _, ok := d.member(a.PID()); ok {
		t.Error("master a's row is still there after it left")
	}
	// The drain lasted longer than a ttl and a beat after b was trusted:
	// had a's row stopped beating, b would have released the job.
	var finished time.Time
	if err := d.pool.QueryRow(context.Background(), `SELECT finished_at FROM fleet_jobs`).Scan(&finished); err != nil {
		t.Fatal(err)
	}
	if took := finished.Sub(drainAt); took < mmTTL+mmBeat {
		t.Fatalf("the drain lasted %s, less than a ttl and a beat: the test proves nothing", took)
	}
	checkOutcomes(t, d, file, 1, false)
	stopMasters(t, b)
}

// testKilledMaster: two masters list each other; kill -9 of one takes its
// children with it, its row goes offline a ttl after its last beat, and
// the other runs its jobs: those it was running are recorded lost once,
// and every job completes once.
func testKilledMaster(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	twoProcs := []string{"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"}
	a := apptest.Start(t, dir, mmEnv(url, "a", twoProcs...), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b", twoProcs...), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a's row", func(member) bool { return true })
	bm := d.waitMember(b, 10*time.Second, "master b's row", func(member) bool { return true })
	later := am.StartedAt
	if bm.StartedAt.After(later) {
		later = bm.StartedAt
	}
	var first fleet.MastersView
	apptest.Eventually(t, 10*time.Second, "both masters listed online", func() bool {
		first = masters(t, url, false)
		ma, okA := findMaster(first, am.Instance)
		mb, okB := findMaster(first, bm.Instance)
		return okA && okB && ma.Liveness == "online" && mb.Liveness == "online"
	})
	if seen := first.At.Sub(later); seen > 2*mmBeat {
		t.Errorf("both masters were listed %s after the later one started, more than a couple of beats", seen)
	}

	d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	apptest.Eventually(t, 10*time.Second, "each master running two processes", func() bool {
		v := masters(t, url, false)
		ma, _ := findMaster(v, am.Instance)
		mb, _ := findMaster(v, bm.Instance)
		return processes(t, ma) == 2 && processes(t, mb) == 2
	})
	const n = 16
	file := dispatchTo(t, url, dir, "default", n, 2000)
	apptest.Eventually(t, 10*time.Second, "every slot of both masters busy", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 4 &&
			d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, bm.Instance) == 4
	})
	workers := apptest.Children(a.PID())
	if err := a.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := d.now()
	held := d.ids(`SELECT id FROM queue_jobs WHERE reserved_master = $1`, am.Instance)
	apptest.Eventually(t, 2*time.Second, "the killed master's workers to die with it", func() bool {
		return !slices.ContainsFunc(workers, apptest.Alive)
	})

	apptest.Eventually(t, mmTTL+5*time.Second, "master a listed offline", func() bool {
		v := masters(t, url, true)
		m, ok := findMaster(v, am.Instance)
		if !ok || m.Liveness != "offline" {
			return false
		}
		// Its last beat came before the kill, so its row expired at most
		// a ttl after it: a clock-free bound, whatever the machine's load
		// did to this listing's start.
		if late := m.ExpiresAt.Sub(killedAt); late > mmTTL {
			t.Errorf("master a's row expires %s after it was killed, more than a ttl", late)
		}
		if m.ExpiresAt.Sub(m.BeatAt) != mmTTL {
			t.Errorf("master a's row expires %s after its last beat, want the ttl", m.ExpiresAt.Sub(m.BeatAt))
		}
		return true
	})
	apptest.Eventually(t, 30*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	h := checkOutcomes(t, d, file, n, true)
	if lost := h.lost(); !slices.Equal(lost, held) {
		t.Errorf("lost attempts of jobs %v, want those a was running when killed: %v", lost, held)
	}
	for _, id := range held {
		if h[id]["lost"] != 1 {
			t.Errorf("job %d: %v, want one lost attempt then one completed", id, h[id])
		}
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed' AND master = $1 AND finished_at > $2`,
		am.Instance, killedAt); k != 0 {
		t.Errorf("%d jobs completed under the killed master after its death", k)
	}
	stopMasters(t, b)
}

// testLinger: with on_stop = "linger" the stopped master's row shows
// draining for linger_secs, without holding the process, then offline.
func testLinger(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	// Long enough that fleet:masters, started right after the exit, finds
	// the row on a busy machine.
	const linger = 12 * time.Second
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__ON_STOP=linger",
		"APP_FLEET__LINGER_SECS="+strconv.Itoa(int(linger/time.Second))), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, a, 10*time.Second); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	// The process is gone; its row lingers.
	v := masters(t, url, false)
	m, ok := findMaster(v, am.Instance)
	if !ok || m.Liveness != "draining" || m.State != "draining" {
		t.Fatalf("right after the master exited, fleet:masters shows %+v (listed %v), want it draining", m, ok)
	}
	if got := m.ExpiresAt.Sub(m.BeatAt); got != linger {
		t.Errorf("the last row lives %s, want linger_secs (%s)", got, linger)
	}
	apptest.Eventually(t, linger+5*time.Second, "the lingering row offline", func() bool {
		v := masters(t, url, true)
		m, ok := findMaster(v, am.Instance)
		if !ok {
			t.Fatal("the lingering row was deleted instead of going offline")
		}
		if m.Liveness == "draining" && v.At.After(m.ExpiresAt) {
			t.Fatalf("draining at %s, after the row expired at %s", v.At, m.ExpiresAt)
		}
		return m.Liveness == "offline"
	})
	if _, ok := findMaster(masters(t, url, false), am.Instance); ok {
		t.Error("fleet:masters without --all lists the offline master")
	}
}

// testFrozen: kill -STOP of master a (with its children too when
// withChildren) for 3 × ttl while master b runs a stream of short jobs,
// then kill -CONT. No job completes twice or fails, a's children claim
// nothing once a's row has been expired for a second, b releases what a
// held, and a rejoins.
func testFrozen(t *testing.T, srv *mmServer, withChildren bool) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	bm := d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	const n = 80
	file := dispatchTo(t, url, dir, "default", n, 300)
	apptest.Eventually(t, 10*time.Second, "master a running jobs", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) > 0
	})
	pids := []int{a.PID()}
	freeze(t, a.PID())
	// Stopped, the master starts no child: these are all of them.
	kids := apptest.Children(a.PID())
	if len(kids) == 0 {
		t.Fatal("master a has no children")
	}
	if withChildren {
		freeze(t, kids...)
		pids = append(pids, kids...)
	}
	frozenAt := d.now()
	fenceFrom := frozenAt.Add(mmTTL + time.Second)
	t.Logf("froze %v at %s", pids, frozenAt.Format(time.RFC3339Nano))

	// Wait, on the database clock, until b has beaten 3 × ttl past the
	// freeze and holds nothing of a's: the fleet saw a gone and b
	// released what a held.
	const claimedLate = `SELECT count(*) FROM (
			SELECT reserved_at, worker, master FROM fleet_jobs
			UNION ALL SELECT reserved_at, reserved_by, reserved_master FROM queue_jobs) r
		WHERE (r.master = $1 OR r.worker LIKE $2 || '/%') AND r.reserved_at > $3
		  AND ($4::timestamptz IS NULL OR r.reserved_at < $4)`
	sawOffline, waitingLate := false, false
	apptest.Eventually(t, 3*mmTTL+10*time.Second, "b beating 3 × ttl past the freeze, nothing of a's held", func() bool {
		if m, ok := d.member(a.PID()); ok && !m.live() {
			sawOffline = true
		}
		if !waitingLate {
			waitingLate = d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND now() > $1`, fenceFrom) > 0
		}
		if k := d.count(claimedLate, am.Instance, am.Name, fenceFrom, nil); k != 0 {
			t.Fatalf("a's workers claimed %d jobs more than a ttl and a second after the freeze", k)
		}
		m, _ := d.member(b.PID())
		return m.BeatAt.Sub(frozenAt) >= 3*mmTTL &&
			d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 0
	})
	if !sawOffline {
		t.Error("a's row never showed offline while a was frozen")
	}
	if !waitingLate {
		t.Error("no job was waiting once a's row had been expired a second: the test proves nothing about fencing")
	}
	for _, pid := range kids {
		// Z: it exited, fenced for a ttl, and waits for its stopped master.
		t.Logf("child %d of the frozen master is in state %c", pid, apptest.ProcState(pid))
	}
	contAt := d.now()
	thaw(t, pids...)
	d.waitMember(a, 10*time.Second, "master a online again", func(m member) bool { return m.live() && m.State == "running" })
	apptest.Eventually(t, 40*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	if k := d.count(claimedLate, am.Instance, am.Name, fenceFrom, contAt); k != 0 {
		t.Errorf("a's workers claimed %d jobs between a ttl and a second after the freeze and the continue", k)
	}
	h := checkOutcomes(t, d, file, n, true)
	t.Logf("a frozen %s; lost attempts: %v; b is %s", contAt.Sub(frozenAt).Round(time.Millisecond), h.lost(), bm.Instance)
	stopMasters(t, a, b)
}

// testHandRunWorker: a fleet:work started by hand keeps a member row of
// its own, so a master with a short default timeout (3 s) leaves alone a
// job that runs past that timeout, its grace and the overdue slack, and
// the job completes once.
func testHandRunWorker(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	short := []string{"APP_QUEUE__TIMEOUT_SECS=3", "APP_QUEUE__TIMEOUT_GRACE_SECS=1"}
	w := apptest.Start(t, dir, append(apptest.FleetEnv(url), short...), "fleet:work", "--queue", "hand", "--timeout", "20s", "--concurrency", "1")
	wm := d.waitMember(w, 10*time.Second, "the hand-run worker's row", func(m member) bool { return m.live() })
	if wm.Kind != "worker" {
		t.Fatalf("the hand-run worker's row is of kind %q", wm.Kind)
	}
	// Longer than the master's timeout + grace + 5 s of overdue slack.
	const ms = 10000
	file := dispatchTo(t, url, dir, "hand", 1, ms)
	apptest.Eventually(t, 10*time.Second, "the job reserved under the worker's own row", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, wm.Instance) == 1
	})
	m := apptest.Start(t, dir, mmEnv(url, "m", short...), "fleet")
	mm := d.waitMember(m, 10*time.Second, "the master trusted", member.trusted)
	if _, ok := findMaster(masters(t, url, true), wm.Instance); ok {
		t.Error("fleet:masters lists the hand-run worker")
	}
	apptest.Eventually(t, 20*time.Second, "the job done", func() bool {
		if r, ok := d.member(w.PID()); !ok || !r.live() {
			t.Fatalf("the hand-run worker's row is not live while it runs its job: %+v", r)
		}
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	var runtime float64
	var finished time.Time
	if err := d.pool.QueryRow(context.Background(), `SELECT runtime_ms, finished_at FROM fleet_jobs`).Scan(&runtime, &finished); err != nil {
		t.Fatal(err)
	}
	if runtime < ms || !finished.After(mm.BeatAt) {
		t.Fatalf("the job ran %.0f ms, finishing at %s, the master trusted since %s: the test proves nothing", runtime, finished, mm.BeatAt)
	}
	checkOutcomes(t, d, file, 1, false)
	stopMasters(t, w)
	if _, ok := d.member(w.PID()); ok {
		t.Error("the hand-run worker's row is still there after it exited")
	}
	stopMasters(t, m)
}

// testLockedMembership: an ACCESS EXCLUSIVE lock on fleet_masters for
// 3 × ttl. Every beat and claim waits on it; jobs that were running go on
// and their outcomes are written while it is held; once it goes nobody
// was presumed dead (no lost attempt), nothing completes twice, and each
// master logged its failing beats once.
func testLockedMembership(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	start := time.Now()
	for _, x := range []*apptest.App{a, b} {
		d.waitMember(x, 10*time.Second, "both masters trusted", member.trusted)
	}
	// While the fleet is paused, short and long jobs alternate, so that
	// each worker's first claim (of two) takes one of each: one of its jobs
	// finishes, and its next claim waits on the lock, while the other runs.
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "fleet:pause"); r.Code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	for _, x := range []*apptest.App{a, b} {
		d.waitMember(x, 10*time.Second, "both masters paused", func(m member) bool { return m.State == "paused" })
	}
	var file string
	for range 4 {
		file = dispatchTo(t, url, dir, "default", 1, 1500)
		dispatchTo(t, url, dir, "default", 1, 3500)
	}
	dispatchTo(t, url, dir, "default", 8, 300)
	const n = 16
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "fleet:continue"); r.Code != 0 {
		t.Fatalf("continue: %+v", r)
	}
	apptest.Eventually(t, 10*time.Second, "every slot of both masters busy", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})

	ctx := context.Background()
	lock, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE fleet_masters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	lockClock := func() time.Time {
		var at time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	lockedAt := lockClock()
	// No claim can be under way now (each reads fleet_masters): these are
	// the jobs running under the lock.
	running := d.ids(`SELECT id FROM queue_jobs WHERE reserved_by IS NOT NULL`)
	// The lock is held 3 ttls; past them, the deadline only catches
	// outcomes that never get written (Slack times an idle machine's 10 s).
	deadline := lockedAt.Add(3*mmTTL + apptest.Slack*10*time.Second)
	var heldFor time.Duration
	for {
		done := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed' AND job_id = ANY($1)`, running)
		at := lockClock()
		heldFor = at.Sub(lockedAt)
		if done == len(running) && heldFor >= 3*mmTTL {
			break
		}
		if at.After(deadline) {
			_ = tx.Rollback(ctx)
			t.Fatalf("under the lock, %d of the %d jobs running when it was taken got their outcome written within %s",
				done, len(running), at.Sub(lockedAt).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet_masters locked for %s over jobs %v", heldFor.Round(time.Millisecond), running)

	apptest.Eventually(t, 30*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	for _, x := range []*apptest.App{a, b} {
		d.waitMember(x, 10*time.Second, "both masters online again", func(m member) bool { return m.live() })
	}
	stopMasters(t, a, b)
	countBeatFailures(t, start, map[string]*apptest.App{"a": a, "b": b})
}

// testDatabaseRestart: PostgreSQL, a private cluster, stopped for 3 × ttl
// under two trusted masters and a stream of jobs, then started again on
// the same data: every row expired together, so nobody is presumed dead
// (no lost attempt), nothing runs or completes twice, and every job is
// done.
// The kinds of database outage testDatabaseOutage makes.
type outage int

const (
	// outageStop stops the server and starts it again.
	outageStop outage = iota
	// outageReadOnly makes every session read-only by
	// default_transaction_read_only, the way a failover to a standby looks
	// for a while.
	outageReadOnly
	// outageFreeze stops the postmaster and every backend with SIGSTOP:
	// connections stay open and statements hang rather than fail.
	outageFreeze
)

// testDatabaseOutage takes PostgreSQL away for 3 × ttl under two trusted
// masters and a stream of jobs. No job may complete twice or be lost.
func testDatabaseOutage(t *testing.T, kind outage) {
	cluster := ownCluster(t)
	ctx := context.Background()
	url := cluster.URL("postgres")
	dir := t.TempDir()
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "migrate"); r.Code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	d := openDB(t, url)
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	start := time.Now()
	d.waitMember(a, 15*time.Second, "master a trusted", member.trusted)
	d.waitMember(b, 15*time.Second, "master b trusted", member.trusted)
	const n = 40
	file := dispatchTo(t, url, dir, "default", n, 500)
	apptest.Eventually(t, 10*time.Second, "both masters running jobs", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})

	// The switch is flipped from a session of its own, which keeps writing.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	setReadOnly := func(on bool) {
		t.Helper()
		stmt := `ALTER SYSTEM RESET default_transaction_read_only`
		if on {
			stmt = `ALTER SYSTEM SET default_transaction_read_only = on`
		}
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			t.Fatal(err)
		}
	}
	var frozen []int
	switch kind {
	case outageReadOnly:
		if _, err := admin.Exec(ctx, `SET default_transaction_read_only = off`); err != nil {
			t.Fatal(err)
		}
		setReadOnly(true)
	case outageFreeze:
		b, err := os.ReadFile(filepath.Join(cluster.DataDir(), "postmaster.pid"))
		if err != nil {
			t.Fatal(err)
		}
		postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
		if err != nil {
			t.Fatal(err)
		}
		frozen = append([]int{postmaster}, apptest.Children(postmaster)...)
		freeze(t, frozen...)
	default:
		if err := cluster.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stoppedAt := time.Now()
	apptest.Eventually(t, 3*mmTTL+10*time.Second, "both masters failing to beat, for 3 × ttl", func() bool {
		return strings.Contains(a.Output(), "beat failed") && strings.Contains(b.Output(), "beat failed") &&
			time.Since(stoppedAt) >= 3*mmTTL
	})
	switch kind {
	case outageReadOnly:
		setReadOnly(false)
	case outageFreeze:
		thaw(t, frozen...)
	default:
		if err := cluster.restart(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("PostgreSQL was away (outage %d) for %s", kind, time.Since(stoppedAt).Round(time.Millisecond))
	if !apptest.Within(40*time.Second, func() bool { return d.count(`SELECT count(*) FROM queue_jobs`) == 0 }) {
		t.Errorf("not within 40s: every job done; %d left, %d reserved, %d fenced-exit lines\nmaster a:\n%s\nmaster b:\n%s",
			d.count(`SELECT count(*) FROM queue_jobs`), d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`),
			strings.Count(a.Output()+b.Output(), "fenced"), tail(a.Output(), 3000), tail(b.Output(), 3000))
		return
	}
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a, b)
	countBeatFailures(t, start, map[string]*apptest.App{"a": a, "b": b})
}

// countBeatFailures checks that each master logged its failing beats, at
// most once a minute since start.
func countBeatFailures(t *testing.T, start time.Time, apps map[string]*apptest.App) {
	t.Helper()
	allowed := 1 + int(time.Since(start)/time.Minute)
	for name, x := range apps {
		k := strings.Count(x.Output(), "beat failed")
		if k < 1 || k > allowed {
			t.Errorf("master %s logged %d 'beat failed' lines, want 1 to %d (at most one a minute):\n%s", name, k, allowed, x.Output())
		}
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// testFrozenChild: SIGSTOP of one child (its master keeps beating) for
// 3 × ttl under a stream of jobs, then SIGCONT. Its master's row stays live,
// so nobody releases what the child holds; the child finishes those jobs
// once thawed, and every job completes exactly once with no attempt lost.
func testFrozenChild(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	const n = 40
	file := dispatchTo(t, url, dir, "default", n, 300)
	apptest.Eventually(t, 10*time.Second, "master a running jobs", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) > 0
	})
	kids := apptest.Children(a.PID())
	if len(kids) == 0 {
		t.Fatal("master a has no children")
	}
	freeze(t, kids[0])
	frozenAt := d.now()
	apptest.Eventually(t, 3*mmTTL+10*time.Second, "a beating 3 × ttl past the child's freeze", func() bool {
		m, ok := d.member(a.PID())
		if ok && !m.live() {
			t.Fatal("master a's row expired while only its child was frozen")
		}
		return ok && m.BeatAt.Sub(frozenAt) >= 3*mmTTL
	})
	thaw(t, kids[0])
	apptest.Eventually(t, 40*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a, b)
}

// testTerminatedSessions: pg_terminate_backend of every session of the
// fleet's database (pools and the workers' LISTEN connections included),
// then fleet:pause: every master applies it (its row shows the supervisor
// paused) and no job starts while paused; after fleet:continue a new
// dispatch wakes the workers and every job completes once.
func testTerminatedSessions(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	d.waitMember(a, 10*time.Second, "master a trusted", member.trusted)
	d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	killed := d.count(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend') k`)
	if killed < 4 {
		t.Fatalf("terminated %d sessions, want the masters' and the workers'", killed)
	}
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "fleet:pause"); r.Code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	pausedAll := func() bool {
		v := masters(t, url, false)
		n := 0
		for _, m := range v.Masters {
			var sups []struct {
				Paused bool `json:"paused"`
			}
			if json.Unmarshal(m.Supervisors, &sups) == nil && len(sups) > 0 && sups[0].Paused {
				n++
			}
		}
		return n == 2
	}
	apptest.Eventually(t, 10*time.Second, "both masters applying the pause after their sessions were killed", pausedAll)
	pausedAt := d.now()
	file := dispatchTo(t, url, dir, "default", 20, 100)
	// While paused nothing is claimed: wait (on the database clock) for
	// two ttls of beats past the pause, checking all along.
	apptest.Eventually(t, 2*mmTTL+10*time.Second, "two ttls of beats while paused", func() bool {
		if k := d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`); k != 0 {
			t.Fatalf("%d jobs claimed while every supervisor was paused", k)
		}
		m, ok := d.member(a.PID())
		return ok && m.BeatAt.Sub(pausedAt) >= 2*mmTTL
	})
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "fleet:continue"); r.Code != 0 {
		t.Fatalf("continue: %+v", r)
	}
	apptest.Eventually(t, 30*time.Second, "every job done after continue", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, 20, false)
	stopMasters(t, a, b)
}

// testSeveralSIGTERMs: SIGTERM three times in a row (an impatient operator,
// or a supervisor that repeats it) while jobs run: the master still drains
// gracefully, exits 0 once its jobs are done, and every job completes once.
func testSeveralSIGTERMs(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	file := dispatchTo(t, url, dir, "default", 4, 3000)
	apptest.Eventually(t, 10*time.Second, "a running all four jobs", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 4
	})
	for range 3 {
		if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a burst, not one signal: nothing waits on this
	}
	if code := waitExit(t, a, 30*time.Second); code != 0 {
		t.Fatalf("master exited %d after repeated SIGTERMs, want 0", code)
	}
	if n := d.count(`SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Fatalf("%d jobs left after the master exited", n)
	}
	checkOutcomes(t, d, file, 4, false)
}

// testRecyclingUnderLoad: workers recycled every 7 jobs (max_jobs) while
// two masters work a stream of jobs: replacements start at once, and every
// job completes exactly once, none lost.
func testRecyclingUnderLoad(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	recycle := []string{"APP_FLEET__SUPERVISORS__WORK__MAX_JOBS=7", "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"}
	a := apptest.Start(t, dir, mmEnv(url, "a", recycle...), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b", recycle...), "fleet")
	d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	d.waitMember(b, 10*time.Second, "master b running", func(m member) bool { return m.State == "running" })
	const n = 120
	file := dispatchTo(t, url, dir, "default", n, 40)
	apptest.Eventually(t, 40*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a, b)
	if out := a.Output() + b.Output(); strings.Count(out, "worker recycled") < n/7-2 {
		t.Errorf("%d recycles for %d jobs at max_jobs 7: the test did not recycle", strings.Count(out, "worker recycled"), n)
	}
}

// testCrashLoopingGroup: the workers of one supervisor exit 1 at start,
// again and again. The master backs off, logs the crash loop as an error
// after five failures within a minute, and the other supervisor's jobs
// flow; the crashing queue's jobs wait, none failed or lost.
func testCrashLoopingGroup(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, append(mmEnv(url, "a",
		"APP_FLEET__SUPERVISORS__BROKEN__QUEUES=broken",
		"APP_FLEET__SUPERVISORS__BROKEN__MAX_PROCESSES=1"),
		apptest.EnvCrashQueue+"=broken"), "fleet")
	d.waitMember(a, 10*time.Second, "master a up", func(m member) bool { return m.live() })
	file := dispatchTo(t, url, dir, "default", 20, 50)
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "dispatch", "--name", "demo.noop", "--queue", "broken", "--count", "3"); r.Code != 0 {
		t.Fatalf("dispatch to broken: %+v", r)
	}
	apptest.Eventually(t, 40*time.Second, "the crash-loop error", func() bool {
		return strings.Contains(a.Output(), "workers keep failing: five failures within a minute")
	})
	apptest.Eventually(t, 20*time.Second, "the healthy supervisor's jobs done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE queue = 'default'`) == 0
	})
	if n := d.count(`SELECT count(*) FROM queue_jobs WHERE queue = 'broken' AND reserved_by IS NULL AND attempts = 0`); n != 3 {
		t.Errorf("%d of the broken queue's 3 jobs untouched, want 3", n)
	}
	if _, err := d.pool.Exec(context.Background(), `DELETE FROM queue_jobs WHERE queue = 'broken'`); err != nil {
		t.Fatal(err)
	}
	checkOutcomes(t, d, file, 20, false)
	stopMasters(t, a)
}

// testSIGTERMWithTimeouts: SIGTERM to a master running jobs within their
// timeout and jobs past it (2 s timeout, 6 s of work, one try). The master
// drains: the short jobs complete, the long ones are cut at their timeout
// and fail for good, each with exactly one attempt; nothing is lost or run
// twice, and the master exits 0.
func testSIGTERMWithTimeouts(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	// The short jobs run long enough (4 s) to be still running once the
	// long ones are dispatched and started, however loaded the machine.
	// Each job notes its start in started.txt: a job claimed but not
	// started when the SIGTERM comes is given back unrun, rightly, and
	// this test is about jobs that run.
	file, started := filepath.Join(dir, "runs.txt"), filepath.Join(dir, "started.txt")
	for _, j := range []struct {
		ms    int
		flags []string
	}{{4000, nil}, {6000, []string{"--timeout", "2s", "--tries", "1"}}} {
		payload, _ := json.Marshal(map[string]any{"ms": j.ms, "file": file, "started": started})
		if r := apptest.Run(t, dir, apptest.DBEnv(url), append([]string{"dispatch", "--name", "test.sleep", "--count", "2",
			"--payload", string(payload)}, j.flags...)...); r.Code != 0 {
			t.Fatalf("dispatch the jobs of %d ms: %+v", j.ms, r)
		}
	}
	apptest.Eventually(t, 20*time.Second, "a running all four jobs", func() bool {
		return len(apptest.ReadRuns(t, started)) == 4 &&
			d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 4
	})
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, a, 30*time.Second); code != 0 {
		t.Fatalf("master exited %d, want 0", code)
	}
	if n := d.count(`SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Errorf("%d jobs left after the drain", n)
	}
	if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`); n != 2 {
		t.Errorf("%d completed attempts, want the 2 short jobs", n)
	}
	if n := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE attempts = 1`); n != 2 {
		t.Errorf("%d failed jobs with one attempt, want the 2 long ones", n)
	}
	if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'timed_out'`); n != 2 {
		t.Errorf("%d timed-out attempts, want 2", n)
	}
	if n := d.count(`SELECT count(*) FROM (SELECT job_id FROM fleet_jobs GROUP BY job_id HAVING count(*) > 1) x`); n != 0 {
		t.Errorf("%d jobs with more than one attempt", n)
	}
}
