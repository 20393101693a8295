package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The cold and masters scenarios: a backlog met by processes that start
// onto it, timed from the moment they are started, as a deploy meets its
// backlog.
const (
	coldConc      = 1000 // the total slots of every side
	coldProcesses = 2    // the cold master's children
	coldSup       = "bench_cold"
)

// DefaultMasters are the numbers of masters the masters scenario
// compares unless --masters says otherwise.
const DefaultMasters = "1,2,4,8"

// mastersList parses --masters (empty: DefaultMasters): numbers of masters
// from 1 to coldConc, each sharing coldConc slots.
func mastersList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultMasters
	}
	ns, err := parseInts("--masters", s)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if n > coldConc {
			return nil, fmt.Errorf("--masters %q: at most %d masters (they share %d slots)", s, coldConc, coldConc)
		}
	}
	return ns, nil
}

// coldRound is one drain of a path started cold: the seconds from the
// process's start to its first claim (start-up) and to the queue empty,
// the rate over the whole, and the CPU it cost per 1000 jobs: the
// processes the bench started and their children (FleetCPU), and the
// server processes of their sessions (DatabaseCPU, 0 when the server is on
// another host), read when the queue was found empty.
type coldRound struct {
	StartupSecs float64 `json:"startup_secs"`
	Secs        float64 `json:"secs"`
	JobsPerSec  float64 `json:"jobs_per_sec"`
	FleetCPU    float64 `json:"fleet_cpu_ms_per_1000_jobs"`
	DatabaseCPU float64 `json:"database_cpu_ms_per_1000_jobs"`
}

// coldPath is one path's rounds and their medians.
type coldPath struct {
	Processes         int         `json:"processes"`
	Concurrency       int         `json:"concurrency"`
	Rounds            []coldRound `json:"rounds"`
	Median            float64     `json:"median_jobs_per_sec"`
	MedianStartup     float64     `json:"median_startup_secs"`
	MedianFleetCPU    float64     `json:"median_fleet_cpu_ms_per_1000_jobs"`
	MedianDatabaseCPU float64     `json:"median_database_cpu_ms_per_1000_jobs"`
}

func (p *coldPath) medians() {
	p.Median = medianOf(p.Rounds, func(r coldRound) float64 { return r.JobsPerSec })
	p.MedianStartup = round(medianOf(p.Rounds, func(r coldRound) float64 { return r.StartupSecs }), 3)
	p.MedianFleetCPU = round(medianOf(p.Rounds, func(r coldRound) float64 { return r.FleetCPU }), 1)
	p.MedianDatabaseCPU = round(medianOf(p.Rounds, func(r coldRound) float64 { return r.DatabaseCPU }), 1)
}

// medianOf is the median of f over rounds.
func medianOf(rounds []coldRound, f func(coldRound) float64) float64 {
	var r pathRates
	for _, x := range rounds {
		r.JobsPerSec = append(r.JobsPerSec, f(x))
	}
	r.median()
	return r.Median
}

// cpuNote describes a path's CPU per 1000 jobs.
func cpuNote(fleet, database float64) string {
	if database == 0 {
		return fmt.Sprintf("CPU per 1000 jobs: %.0f ms in fleet's processes", fleet)
	}
	return fmt.Sprintf("CPU per 1000 jobs: %.0f ms in fleet's processes, %.0f ms in the database's", fleet, database)
}

// coldResult is the cold scenario's part of the JSON document.
type coldResult struct {
	Jobs   int      `json:"jobs"`
	Rounds int      `json:"rounds"`
	Master coldPath `json:"master"`
	One    coldPath `json:"one_process"`
	// MasterVsOne is the master's median over the lone worker's, CPUVsOne
	// the master's CPU per job (fleet's and the database's) over the lone
	// worker's.
	MasterVsOne float64 `json:"master_vs_one_process"`
	CPUVsOne    float64 `json:"master_cpu_per_job_vs_one_process"`
}

// cold drains --jobs no-op jobs, --rounds times each, through a master
// process (app fleet, one supervisor of 2 processes × 500 with the
// default balance) and through one fleet:work × 1000, each started onto
// the backlog and timed from its start to the queue empty. The rounds
// alternate which goes first (A B, B A, ...), so that what a drain leaves
// behind (dead rows, a warm cache) touches both alike.
func (b *bench) cold(ctx context.Context) error {
	q := Prefix + "cold"
	n := b.f.Jobs
	res := &coldResult{Jobs: n, Rounds: b.f.Rounds,
		Master: coldPath{Processes: coldProcesses, Concurrency: coldConc / coldProcesses},
		One:    coldPath{Processes: 1, Concurrency: coldConc}}
	b.progressf("cold: %d rounds of %d no-op jobs through a master process (app fleet) of %d × %d and through one fleet:work × %d, each timed from its start to the queue empty",
		res.Rounds, n, coldProcesses, coldConc/coldProcesses, coldConc)
	for round := range res.Rounds {
		order := []*coldPath{&res.Master, &res.One}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, p := range order {
			var r coldRound
			var err error
			if p == &res.Master {
				r, err = b.mastersDrain(ctx, q, n, 1, coldProcesses, p.Concurrency)
			} else {
				r, err = b.coldWork(ctx, q, n)
			}
			if err != nil {
				return fmt.Errorf("round %d: %w", round+1, err)
			}
			p.Rounds = append(p.Rounds, r)
			if err := b.cleanup(ctx, "after a cold drain"); err != nil {
				return err
			}
		}
	}
	res.Master.medians()
	res.One.medians()
	res.MasterVsOne = round(res.Master.Median/res.One.Median, 3)
	if cpu := res.One.MedianFleetCPU + res.One.MedianDatabaseCPU; cpu > 0 {
		res.CPUVsOne = round((res.Master.MedianFleetCPU+res.Master.MedianDatabaseCPU)/cpu, 3)
	}
	b.rep.Cold = res
	for _, p := range []struct {
		p    coldPath
		what string
	}{{res.Master, "master process"}, {res.One, "one fleet:work"}} {
		b.addRate("cold", fmt.Sprintf("%s, %d × concurrency %d, from its start", p.what, p.p.Processes, p.p.Concurrency),
			b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/p.p.Median, 3), JobsPerSec: p.p.Median}),
			fmt.Sprintf("median of %d rounds of %d jobs; start to first claim %.3f s; %s", res.Rounds, n, p.p.MedianStartup,
				cpuNote(p.p.MedianFleetCPU, p.p.MedianDatabaseCPU)))
	}
	b.addRow("cold", "ratio", fmt.Sprintf("master / one process: %.3f×", res.MasterVsOne),
		fmt.Sprintf("medians, start-up included; the master's CPU per job %.3f× the lone worker's", res.CPUVsOne))
	return nil
}

// coldWork inserts n jobs into q and drains them with one fleet:work ×
// coldConc started onto them, timed from its start to the queue empty.
func (b *bench) coldWork(ctx context.Context, q string, n int) (coldRound, error) {
	if err := b.insert(ctx, q, n); err != nil {
		return coldRound{}, err
	}
	env, err := b.childEnv()
	if err != nil {
		return coldRound{}, err
	}
	since := time.Now()
	p, err := b.startProc([]string{"fleet:work", "--queue", q, "--concurrency", strconv.Itoa(coldConc), "--reports"}, env)
	if err != nil {
		return coldRound{}, err
	}
	defer func() { _ = p.stop() }()
	stop := b.progress(ctx, fmt.Sprintf("fleet:work × %d", coldConc), int64(n), b.doneOf(q, int64(n)))
	emptyAt, err := b.waitEmpty(ctx, p.exited, q, 10*time.Millisecond)
	stop()
	var cpu cpuUsed
	if err == nil {
		cpu = b.cpuUsed(ctx, []*benchProc{p})
		err = p.stop()
	}
	if err != nil {
		return coldRound{}, fmt.Errorf("one fleet:work × %d: %w", coldConc, err)
	}
	return b.coldDrained(ctx, q, n, since, emptyAt, cpu)
}

// cpuUsed is the CPU a drain's processes and their sessions' server
// processes have used.
type cpuUsed struct {
	fleet, database time.Duration
}

// cpuUsed reads the CPU the processes ps (with their children) and the
// server processes of fleet's sessions have used so far. The database's is
// 0 when its server is not on this host.
func (b *bench) cpuUsed(ctx context.Context, ps []*benchProc) cpuUsed {
	var c cpuUsed
	for _, p := range ps {
		if d, err := procTreeCPU(p.cmd.Process.Pid); err == nil {
			c.fleet += d
		}
	}
	pids, err := b.db.fleetBackends(ctx)
	if err != nil {
		return c
	}
	for _, pid := range pids {
		if !procIsPostgres(pid) {
			continue
		}
		if d, err := procCPU(pid); err == nil {
			c.database += d
		}
	}
	return c
}

// coldDrained is how a drain that started its processes at since and
// found the queue empty at emptyAt went.
func (b *bench) coldDrained(ctx context.Context, q string, n int, since, emptyAt time.Time, cpu cpuUsed) (coldRound, error) {
	first, ok, err := b.db.firstReserved(ctx, q, since)
	if err != nil {
		return coldRound{}, err
	}
	if !ok {
		return coldRound{}, fmt.Errorf("%s drained but no attempt is in fleet_jobs", q)
	}
	failed, err := b.db.failedCount(ctx, q)
	if err == nil {
		err = drainFailed(failed)
	}
	if err != nil {
		return coldRound{}, err
	}
	d := emptyAt.Sub(since)
	per := func(c time.Duration) float64 { return round(float64(c.Milliseconds())*1000/float64(n), 1) }
	return coldRound{StartupSecs: round(first.Sub(since).Seconds(), 3), Secs: round(d.Seconds(), 3),
		JobsPerSec: round(float64(n)/d.Seconds(), 1), FleetCPU: per(cpu.fleet), DatabaseCPU: per(cpu.database)}, nil
}

// masterEnv is the environment of a master process the bench starts:
// one supervisor working q with processes × concurrency and the default
// balance, its HTTP listener (metrics, dashboard) on a port of its own.
func (b *bench) masterEnv(q string, processes, concurrency int) ([]string, error) {
	key := "APP_FLEET__SUPERVISORS__" + strings.ToUpper(coldSup) + "__"
	return b.childEnv("APP_FLEET__HTTP__ADDR=127.0.0.1:0", "APP_FLEET__ONLY="+coldSup,
		key+"QUEUES="+q, key+"MAX_PROCESSES="+strconv.Itoa(processes), key+"CONCURRENCY="+strconv.Itoa(concurrency))
}

// mastersDrain inserts n jobs into q and drains them with masters master
// processes (app fleet) of processes × concurrency each, started together
// onto them, timed from their start to the queue empty.
func (b *bench) mastersDrain(ctx context.Context, q string, n, masters, processes, concurrency int) (coldRound, error) {
	what := fmt.Sprintf("%d master(s) of %d × %d", masters, processes, concurrency)
	if err := b.insert(ctx, q, n); err != nil {
		return coldRound{}, err
	}
	env, err := b.masterEnv(q, processes, concurrency)
	if err != nil {
		return coldRound{}, err
	}
	var ps []*benchProc
	defer func() {
		for _, p := range ps {
			_ = p.stop()
		}
	}()
	since := time.Now()
	for range masters {
		p, err := b.startProc([]string{"fleet"}, env)
		if err != nil {
			return coldRound{}, fmt.Errorf("%s: %w", what, err)
		}
		ps = append(ps, p)
	}
	exited := func() error {
		for _, p := range ps {
			if err := p.exited(); err != nil {
				return err
			}
		}
		return nil
	}
	stop := b.progress(ctx, what, int64(n), b.doneOf(q, int64(n)))
	emptyAt, err := b.waitEmpty(ctx, exited, q, 10*time.Millisecond)
	stop()
	var cpu cpuUsed
	if err == nil {
		cpu = b.cpuUsed(ctx, ps)
	}
	for _, p := range ps {
		if serr := p.stop(); err == nil {
			err = serr
		}
	}
	if err != nil {
		return coldRound{}, fmt.Errorf("%s: %w", what, err)
	}
	return b.coldDrained(ctx, q, n, since, emptyAt, cpu)
}

// mastersResult is the masters scenario's part of the JSON document.
type mastersResult struct {
	Jobs        int           `json:"jobs"`
	Rounds      int           `json:"rounds"`
	Concurrency int           `json:"total_concurrency"`
	Cases       []mastersCase `json:"cases"`
}

// mastersCase is one number of masters: each runs one process of
// total/masters slots.
type mastersCase struct {
	Masters int `json:"masters"`
	coldPath
	// MedianFromClaim is the median rate from the first claim to the
	// queue empty, start-up left out.
	MedianFromClaim float64 `json:"median_jobs_per_sec_from_first_claim"`
	// VsOne and VsOneFromClaim are Median and MedianFromClaim over the
	// first case's (one master, by default); CPUVsOne is the CPU per job
	// (fleet's and the database's) over the first case's.
	VsOne          float64 `json:"vs_one_master"`
	VsOneFromClaim float64 `json:"vs_one_master_from_first_claim"`
	CPUVsOne       float64 `json:"cpu_per_job_vs_one_master"`
}

// masters drains --jobs no-op jobs with N master processes on the
// database for each N of --masters (1, 2, 4 and 8), each master one
// process of 1000/N slots, in rounds that run every N once (the order
// turned round each round), each timed from the masters' start to the
// queue empty. The first N is the reference of the ratios.
func (b *bench) masters(ctx context.Context) error {
	q := Prefix + "masters"
	n := b.f.Jobs
	counts, err := mastersList(b.f.Masters)
	if err != nil {
		return err
	}
	res := &mastersResult{Jobs: n, Rounds: b.f.Rounds, Concurrency: coldConc}
	for _, m := range counts {
		res.Cases = append(res.Cases, mastersCase{Masters: m, coldPath: coldPath{Processes: 1, Concurrency: coldConc / m}})
	}
	b.progressf("masters: %d rounds of %d no-op jobs through %v master processes of one process each, %d slots in all",
		res.Rounds, n, counts, coldConc)
	for round := range res.Rounds {
		for i := range res.Cases {
			c := &res.Cases[i]
			if round%2 == 1 {
				c = &res.Cases[len(res.Cases)-1-i]
			}
			r, err := b.mastersDrain(ctx, q, n, c.Masters, 1, c.Concurrency)
			if err != nil {
				return fmt.Errorf("round %d: %w", round+1, err)
			}
			c.Rounds = append(c.Rounds, r)
			if err := b.cleanup(ctx, "after a masters drain"); err != nil {
				return err
			}
		}
	}
	for i := range res.Cases {
		c := &res.Cases[i]
		c.medians()
		c.MedianFromClaim = medianOf(c.Rounds, func(r coldRound) float64 { return round(float64(n)/(r.Secs-r.StartupSecs), 1) })
	}
	one := res.Cases[0]
	for i := range res.Cases {
		c := &res.Cases[i]
		c.VsOne = round(c.Median/one.Median, 3)
		c.VsOneFromClaim = round(c.MedianFromClaim/one.MedianFromClaim, 3)
		if cpu := one.MedianFleetCPU + one.MedianDatabaseCPU; cpu > 0 {
			c.CPUVsOne = round((c.MedianFleetCPU+c.MedianDatabaseCPU)/cpu, 3)
		}
		b.addRate("masters", fmt.Sprintf("%d master(s) × 1 process × concurrency %d, from their start", c.Masters, c.Concurrency),
			b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/c.Median, 3), JobsPerSec: c.Median}),
			fmt.Sprintf("median of %d rounds; %.3f× %d master(s) (%.3f× from the first claim, start-up %.3f s); %s (%.3f×)",
				res.Rounds, c.VsOne, one.Masters, c.VsOneFromClaim, c.MedianStartup, cpuNote(c.MedianFleetCPU, c.MedianDatabaseCPU), c.CPUVsOne))
	}
	b.rep.Masters = res
	return nil
}
