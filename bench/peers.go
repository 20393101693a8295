package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The peers scenario: the same backlog of no-op jobs drained by fleet (a
// master of 2 × 500 and one fleet:work × 1000, as in paths) and by other
// PostgreSQL queues in the settings their own guides give for throughput,
// each in a schema of its own on the same database, in rounds that
// alternate them so that the machine's drift touches them alike. The
// peers are pinned: bench/peers/install.sh builds and installs them into
// Flags.PeersDir; a peer that is not there is left out with a line that
// says how to install it.
const (
	peersMasterProcs = 2
	peersMasterConc  = 500
	peersOneConc     = 1000
	// DefaultPeersDir is where "app bench" looks for the peers, relative
	// to its working directory: where bench/peers/install.sh puts them in
	// a checkout.
	DefaultPeersDir = ".cache/peers"
	// peersInstall says how to install the peers.
	peersInstall = "install it with bash bench/peers/install.sh in a fleet checkout (it needs Go, Node.js and npm) " +
		"and give --peers-dir the directory it installs into (default .cache/peers of the checkout)"
	// peersPoll is how often a peer's drain looks whether jobs are left.
	peersPoll = 20 * time.Millisecond
	// peersCountEvery is how often it counts the jobs left.
	peersCountEvery = 3 * time.Second
)

// peer is a queue the peers scenario compares fleet with: how to check
// that it is installed at the pinned version, how to run its runner
// (bench/peers), and how to see in its tables whether jobs are left.
type peer struct {
	name, version, settings string
	// schema holds the peer's tables during one drain; it is dropped
	// after it (and before, should an interrupted run have left it).
	schema string
	// installed returns the installed version, or an error saying what
	// is missing.
	installed func(ctx context.Context, dir string) (string, error)
	// prepare is the command that creates the peer's tables in the schema
	// and inserts n jobs; work the commands of its worker processes.
	prepare func(dir, url, schema string, n int) []string
	work    func(dir, url, schema string) [][]string
	// left is a statement that reports whether any job of the drain is
	// still to be done; notDone counts the jobs that did not complete once
	// it says none is left (or when the drain stalls).
	left, notDone string
}

// benchPeers are the peers in the order each round runs them.
var benchPeers = []peer{
	{
		name: "river", version: "v0.51.2", schema: "fleet_bench_river",
		settings: "one client, MaxWorkers 2000, FetchCooldown 2 ms (riverpgxv5)",
		installed: func(ctx context.Context, dir string) (string, error) {
			exe := filepath.Join(dir, "river", "river-bench")
			out, err := exec.CommandContext(ctx, exe, "version").Output()
			if err != nil {
				return "", fmt.Errorf("%s: %w", exe, err)
			}
			v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "river ")
			if !ok {
				return "", fmt.Errorf("%s version printed %q", exe, out)
			}
			return v, nil
		},
		prepare: func(dir, url, schema string, n int) []string {
			return []string{filepath.Join(dir, "river", "river-bench"), "-url", url, "-schema", schema, "prepare", "-jobs", strconv.Itoa(n)}
		},
		work: func(dir, url, schema string) [][]string {
			return [][]string{{filepath.Join(dir, "river", "river-bench"), "-url", url, "-schema", schema, "work",
				"-workers", "2000", "-fetch-cooldown", "2ms"}}
		},
		left:    `SELECT EXISTS (SELECT 1 FROM %s.river_job WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))`,
		notDone: `SELECT count(*) FROM %s.river_job WHERE state <> 'completed'`,
	},
	{
		name: "graphile-worker", version: "0.18.0", schema: "fleet_bench_graphile",
		settings: "2 processes × concurrentJobs 100, localQueue size 500, completeJobBatchDelay and failJobBatchDelay 0",
		installed: func(ctx context.Context, dir string) (string, error) {
			if _, err := exec.LookPath("node"); err != nil {
				return "", errors.New("no node on PATH")
			}
			if _, err := os.Stat(filepath.Join(dir, "graphile", "run.mjs")); err != nil {
				return "", err
			}
			raw, err := os.ReadFile(filepath.Join(dir, "graphile", "node_modules", "graphile-worker", "package.json"))
			if err != nil {
				return "", err
			}
			var pkg struct{ Version string }
			if err := json.Unmarshal(raw, &pkg); err != nil {
				return "", fmt.Errorf("graphile-worker's package.json: %w", err)
			}
			return pkg.Version, nil
		},
		prepare: func(dir, url, schema string, n int) []string {
			return []string{"node", filepath.Join(dir, "graphile", "run.mjs"), "prepare", "--url", url, "--schema", schema, "--jobs", strconv.Itoa(n)}
		},
		work: func(dir, url, schema string) [][]string {
			argv := []string{"node", filepath.Join(dir, "graphile", "run.mjs"), "work", "--url", url, "--schema", schema,
				"--concurrency", "100", "--local-queue", "500"}
			return [][]string{argv, argv}
		},
		// Completed jobs are deleted; a failed one stays, with its error.
		left:    `SELECT EXISTS (SELECT 1 FROM %s._private_jobs ORDER BY id LIMIT 1)`,
		notDone: `SELECT count(*) FROM %s._private_jobs`,
	},
}

// peersResult is the peers scenario's part of the JSON document.
type peersResult struct {
	Jobs   int `json:"jobs"`
	Rounds int `json:"rounds"`
	// Paths are fleet's master, fleet's one process, then each peer.
	Paths []peerPath `json:"paths"`
}

// peerPath is one path's rounds, or why it did not run. Each drain is
// timed two ways: from the first job it took (its start-up left out) and
// from the start of its processes (start-up included, as a deploy meets
// a backlog).
type peerPath struct {
	Name     string `json:"name"`
	Version  string `json:"version,omitempty"`
	Settings string `json:"settings"`
	// Missing says what is not installed, and how to install it; the
	// path did not run.
	Missing         string    `json:"missing,omitempty"`
	JobsPerSec      []float64 `json:"jobs_per_sec,omitempty"`
	FromStart       []float64 `json:"jobs_per_sec_from_start,omitempty"`
	Median          float64   `json:"median_jobs_per_sec,omitempty"`
	MedianFromStart float64   `json:"median_jobs_per_sec_from_start,omitempty"`
	// MasterVs and MasterVsFromStart are fleet's master's medians over
	// this path's (not set on the master's own path).
	MasterVs          float64 `json:"master_vs,omitempty"`
	MasterVsFromStart float64 `json:"master_vs_from_start,omitempty"`
}

// peerDrained is one drain's two rates.
type peerDrained struct{ fromFirst, fromStart float64 }

// medians sets the path's medians from its rounds.
func (p *peerPath) medians() {
	r, s := pathRates{JobsPerSec: p.JobsPerSec}, pathRates{JobsPerSec: p.FromStart}
	r.median()
	s.median()
	p.Median, p.MedianFromStart = r.Median, s.Median
}

// peersDir is the directory the peers are looked for in.
func (b *bench) peersDir() string {
	dir := b.f.PeersDir
	if dir == "" {
		dir = DefaultPeersDir
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(b.opts.Dir, dir)
	}
	return dir
}

// findPeers returns the peers' paths, each with Missing set when it is
// not installed at its pinned version.
func (b *bench) findPeers(ctx context.Context) []peerPath {
	dir := b.peersDir()
	out := make([]peerPath, len(benchPeers))
	for i, p := range benchPeers {
		out[i] = peerPath{Name: p.name, Version: p.version, Settings: p.settings}
		v, err := p.installed(ctx, dir)
		switch {
		case err != nil:
			out[i].Missing = fmt.Sprintf("%s %s is not installed in %s (%v): %s", p.name, p.version, dir, err, peersInstall)
		case v != p.version:
			out[i].Missing = fmt.Sprintf("%s in %s is %s, the bench pins %s: %s", p.name, dir, v, p.version, peersInstall)
		}
	}
	return out
}

// peers drains --jobs no-op jobs, --rounds times each, through fleet's
// master, one fleet:work and each installed peer; each round starts one
// path further along the list than the one before, so that no path is
// always first or always after the same one.
func (b *bench) peers(ctx context.Context) error {
	q := Prefix + "peers"
	n := b.f.Jobs
	res := &peersResult{Jobs: n, Rounds: b.f.Rounds, Paths: append([]peerPath{
		{Name: "fleet master", Settings: fmt.Sprintf("a master of %d fleet:work × %d (balance off)", peersMasterProcs, peersMasterConc)},
		{Name: "fleet:work", Settings: fmt.Sprintf("one fleet:work × %d", peersOneConc)},
	}, b.findPeers(ctx)...)}
	var names []string
	var run []int // the paths that run, by index in res.Paths
	for i, p := range res.Paths {
		if p.Missing != "" {
			b.progressf("peers: %s", p.Missing)
			continue
		}
		names = append(names, strings.TrimSpace(p.Name+" "+p.Version))
		run = append(run, i)
	}
	b.progressf("peers: %d rounds of %d no-op jobs through %s; each timed from its start and from its first job taken to the queue empty",
		res.Rounds, n, strings.Join(names, ", "))
	for _, p := range benchPeers {
		if err := b.dropPeerSchema(ctx, p); err != nil {
			return err
		}
	}
	for round := range res.Rounds {
		for k := range run {
			i := run[(round+k)%len(run)]
			path := &res.Paths[i]
			var d peerDrained
			var err error
			switch i {
			case 0:
				d, err = b.peersMaster(ctx, q, n)
			case 1:
				d, err = b.peersOne(ctx, q, n)
			default:
				d, err = b.peerDrain(ctx, benchPeers[i-2], n)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, path.Name, err)
			}
			path.JobsPerSec = append(path.JobsPerSec, d.fromFirst)
			path.FromStart = append(path.FromStart, d.fromStart)
		}
	}
	for _, i := range run {
		res.Paths[i].medians()
	}
	master := res.Paths[0]
	for _, i := range run[1:] {
		p := &res.Paths[i]
		p.MasterVs = round(master.Median/p.Median, 3)
		p.MasterVsFromStart = round(master.MedianFromStart/p.MedianFromStart, 3)
	}
	b.rep.Peers = res
	note := fmt.Sprintf("median of %d rounds of %d jobs, from the first job taken; from the start of its processes", res.Rounds, n)
	var ratios []string
	for _, p := range res.Paths {
		what := strings.TrimSpace(p.Name + " " + p.Version)
		if p.Missing != "" {
			b.addRow("peers", what, "not run", p.Missing)
			continue
		}
		b.addRate("peers", what, b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/p.Median, 3), JobsPerSec: p.Median}),
			fmt.Sprintf("%s %.0f jobs/s; %s", note, p.MedianFromStart, p.Settings))
		if p.MasterVs > 0 {
			ratios = append(ratios, fmt.Sprintf("master / %s %.3f× (%.3f× from the start)", what, p.MasterVs, p.MasterVsFromStart))
		}
	}
	b.addRow("peers", "ratios", strings.Join(ratios, "; "), "medians")
	return nil
}

// peersMaster inserts n jobs into q and drains them through a master of
// peersMasterProcs × peersMasterConc started onto them.
func (b *bench) peersMaster(ctx context.Context, q string, n int) (peerDrained, error) {
	md, err := b.masterDrain(ctx, q, n, peersMasterProcs, peersMasterConc)
	if err == nil {
		err = drainFailed(md.failed)
	}
	if err != nil {
		return peerDrained{}, err
	}
	return peerDrained{fromFirst: md.rate.JobsPerSec, fromStart: md.fromStart.JobsPerSec}, b.cleanup(ctx, "after a peers drain")
}

// peersOne inserts n jobs into q and drains them through one fleet:work ×
// peersOneConc started onto them.
func (b *bench) peersOne(ctx context.Context, q string, n int) (peerDrained, error) {
	r, fromStart, err := b.workDrainSince(ctx, q, n, peersOneConc)
	if err != nil {
		return peerDrained{}, err
	}
	return peerDrained{fromFirst: r.JobsPerSec, fromStart: fromStart.JobsPerSec}, b.cleanup(ctx, "after a peers drain")
}

// peerDrain drains n jobs through p in a schema of its own: it prepares
// them, starts p's worker processes, and times from their start and from
// the first job one of them took to the schema found with no job left;
// then it stops them and drops the schema.
func (b *bench) peerDrain(ctx context.Context, p peer, n int) (peerDrained, error) {
	dir := b.peersDir()
	// The schema goes also when ctx ends first.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := b.dropPeerSchema(cctx, p); err != nil {
			b.progressf("%s: %v", p.name, err)
		}
	}()
	if _, err := b.opts.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{p.schema}.Sanitize()); err != nil {
		return peerDrained{}, fmt.Errorf("create schema %s: %w", p.schema, err)
	}
	b.progressf("%s: inserting %d jobs into schema %s", p.name, n, p.schema)
	prep, err := b.startPeerProc(p.prepare(dir, b.url, p.schema, n))
	if err != nil {
		return peerDrained{}, err
	}
	select {
	case <-prep.done:
	case <-ctx.Done():
		_ = prep.stop()
		return peerDrained{}, ctx.Err()
	}
	if prep.err != nil {
		return peerDrained{}, fmt.Errorf("%s prepare: %w", p.name, prep.err)
	}
	var procs []*peerProc
	defer func() {
		for _, pp := range procs {
			_ = pp.stop()
		}
	}()
	since := time.Now()
	for _, argv := range p.work(dir, b.url, p.schema) {
		pp, err := b.startPeerProc(argv)
		if err != nil {
			return peerDrained{}, err
		}
		procs = append(procs, pp)
	}
	emptyAt, err := b.waitPeerEmpty(ctx, p, procs)
	if err != nil {
		return peerDrained{}, err
	}
	var first time.Time
	for _, pp := range procs {
		if err := pp.stop(); err != nil {
			return peerDrained{}, err
		}
		if f := pp.firstJob(); !f.IsZero() && (first.IsZero() || f.Before(first)) {
			first = f
		}
	}
	if first.IsZero() {
		return peerDrained{}, fmt.Errorf("%s drained but none of its processes said when it took its first job", p.name)
	}
	var notDone int64
	if err := b.opts.Pool.QueryRow(ctx, fmt.Sprintf(p.notDone, pgx.Identifier{p.schema}.Sanitize())).Scan(&notDone); err != nil {
		return peerDrained{}, fmt.Errorf("%s: count the jobs not completed: %w", p.name, err)
	}
	if notDone > 0 {
		return peerDrained{}, fmt.Errorf("%s: %d of %d jobs did not complete", p.name, notDone, n)
	}
	return peerDrained{fromFirst: b.rate(int64(n), emptyAt.Sub(first)).JobsPerSec,
		fromStart: b.rate(int64(n), emptyAt.Sub(since)).JobsPerSec}, nil
}

// waitPeerEmpty polls p's tables every peersPoll until no job is left,
// failing when one of procs exits or no job is done for benchStallAfter.
// Every peersCountEvery it counts what is left, for the progress line and
// the stall (a count scans the peer's table, too dear for every poll).
func (b *bench) waitPeerEmpty(ctx context.Context, p peer, procs []*peerProc) (time.Time, error) {
	schema := pgx.Identifier{p.schema}.Sanitize()
	left, notDone := fmt.Sprintf(p.left, schema), fmt.Sprintf(p.notDone, schema)
	since := time.Now()
	counted, last, lastMove := since, int64(-1), since
	for {
		var more bool
		if err := b.opts.Pool.QueryRow(ctx, left).Scan(&more); err != nil {
			return time.Time{}, fmt.Errorf("%s: look for jobs left: %w", p.name, err)
		}
		now := time.Now()
		if !more {
			return now, nil
		}
		for _, pp := range procs {
			if err := pp.exited(); err != nil {
				return time.Time{}, fmt.Errorf("%s: %w", p.name, err)
			}
		}
		if now.Sub(counted) >= peersCountEvery {
			counted = now
			var n int64
			if err := b.opts.Pool.QueryRow(ctx, notDone).Scan(&n); err != nil {
				return time.Time{}, fmt.Errorf("%s: count the jobs left: %w", p.name, err)
			}
			b.progressf("%s  %d left  %s", p.name, n, now.Sub(since).Round(time.Second))
			if n != last {
				last, lastMove = n, now
			} else if now.Sub(lastMove) > benchStallAfter {
				return time.Time{}, fmt.Errorf("%s: %d jobs left and none done for %s", p.name, n, benchStallAfter)
			}
		}
		if err := sleepCtx(ctx, peersPoll); err != nil {
			return time.Time{}, err
		}
	}
}

func (b *bench) dropPeerSchema(ctx context.Context, p peer) error {
	if _, err := b.opts.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{p.schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", p.schema, err)
	}
	return nil
}

// peerProc is a process of a peer's runner.
type peerProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
	err  error
	once sync.Once

	mu    sync.Mutex
	first time.Time // when it took its first job, as it said ("first UNIX_NANOS")
}

// startPeerProc starts argv in the bench's working directory with the
// bench's environment. Its "first" line is noted; its other lines go to
// the bench's stderr.
func (b *bench) startPeerProc(argv []string) (*peerProc, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = b.opts.Dir
	c.Env = b.opts.Environ
	c.Stderr = b.stderr
	c.SysProcAttr = benchSysProcAttr()
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(argv[0]), err)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(argv[0]), err)
	}
	p := &peerProc{cmd: c, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "first "); ok {
				if ns, err := strconv.ParseInt(rest, 10, 64); err == nil {
					p.mu.Lock()
					p.first = time.Unix(0, ns)
					p.mu.Unlock()
					continue
				}
			}
			if line != "started" && !strings.HasPrefix(line, "ready ") {
				fmt.Fprintln(b.stderr, line)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = c.Wait()
	}()
	return p, nil
}

func (p *peerProc) firstJob() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first
}

// exited returns an error once the process has exited.
func (p *peerProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", filepath.Base(p.cmd.Path), p.err)
	default:
		return nil
	}
}

// stop asks the process to stop (SIGTERM), waits up to 30 s, then kills
// it. It returns the process's exit error, if any.
func (p *peerProc) stop() error {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		// Ended by the stop it was asked for (a runtime may not have had
		// its handler in place yet): no failure.
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				p.err = nil
			}
		}
	})
	if p.err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(p.cmd.Path), p.err)
	}
	return nil
}
