package process

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
	"github.com/fleet-go/fleet/worker"
)

// workerGCPercent is the highest garbage collector's target a fleet:work
// process sets for itself unless GOGC is in its environment, for a live
// heap of up to a quarter of workerGCHeadroom. A worker's live heap is a
// few megabytes when its payloads are small (its jobs in flight and a
// batch of outcomes), so the default of 100 collects very often under
// load: with no-op jobs at concurrency 1000 the collector took about a
// third of the process's CPU, and 400 cut the process's CPU per job by
// about a third and raised the drain by 10–20 % on a 2-core machine, for
// a few megabytes more of heap.
const workerGCPercent = 400

// workerGCHeadroom is how far a worker's heap may grow past its live heap
// before a collection, whatever the live heap (see workerGCPercentFor).
const workerGCHeadroom = 32 << 20

// workerGCPercentFor is a worker's garbage collector's target for a live
// heap of live bytes: the heap may grow by workerGCHeadroom past it, by
// at least its own size (100, Go's default) and at most by four times it
// (workerGCPercent). A fixed 400 would let a worker whose jobs hold large
// payloads (tens of megabytes live, up to its byte budget) grow to five
// times that before collecting; this keeps 400 for the small live heap of
// small payloads and comes down to Go's default as the live heap grows.
func workerGCPercentFor(live uint64) int {
	if live == 0 {
		return workerGCPercent
	}
	return int(min(max(workerGCHeadroom*100/live, 100), workerGCPercent))
}

// workerGC is the GC percent a fleet:work process with environment
// environ starts with, if any: workerGCPercent unless GOGC is set.
func workerGC(environ []string) (int, bool) {
	if _, set := EnvironValue(environ, "GOGC"); set {
		return 0, false
	}
	return workerGCPercent, true
}

// tuneWorkerGC sets the garbage collector's target after each collection
// from the live heap it left (workerGCPercentFor), for the life of the
// process: a finalizer on an object of its own runs once the collector
// freed it, sets the target, and arms the next one. It runs on the
// runtime's finalizer goroutine, and costs a read of one runtime metric
// per collection.
func tuneWorkerGC() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := workerGCPercent
	var arm func()
	arm = func() {
		runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if pct := workerGCPercentFor(sample[0].Value.Uint64()); pct != last {
					debug.SetGCPercent(pct)
					last = pct
				}
			}
			arm()
		})
	}
	arm()
}

// gcSentinel is the object whose finalizer tunes the collector; it is
// large enough not to share a block of the tiny allocator, whose objects
// may never be finalized.
type gcSentinel struct{ _ [32]byte }

// tuneGCOnce starts tuneWorkerGC once per process.
var tuneGCOnce sync.Once

// ReportPipe is the report pipe a master announced to its worker in the
// environment (spawner.ProtocolFDEnv), if any.
type ReportPipe struct {
	FD        string
	Announced bool
}

// TakeWorkerEnviron is the first thing a worker process does, before
// anything else runs: it takes the report pipe's announcement out of the
// process's environment (no handler needs to know, and no program a
// handler starts may inherit it), and sets the garbage collector's
// target, tuned to the live heap after each collection (see
// workerGCPercentFor), unless GOGC is in environ, the process's
// environment.
func TakeWorkerEnviron(environ []string) ReportPipe {
	fd, piped := EnvironValue(environ, spawner.ProtocolFDEnv)
	_ = os.Unsetenv(spawner.ProtocolFDEnv)
	if pct, ok := workerGC(environ); ok {
		debug.SetGCPercent(pct)
		tuneGCOnce.Do(tuneWorkerGC)
	}
	return ReportPipe{FD: fd, Announced: piped}
}

// EnvironValue is the value of key in environ, the last one when it is
// there more than once (as exec does), and whether it is there.
func EnvironValue(environ []string, key string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// WorkerProcess is what RunWorker runs.
type WorkerProcess struct {
	// Config is the app's configuration.
	Config *config.Config
	// Spec is the worker asked for (by a master, or by hand); what it
	// leaves open comes from Config (WorkerConfig).
	Spec spawner.Spec
	// StopWhenEmpty stops the worker once nothing runs and no job is
	// ready.
	StopWhenEmpty bool
	// Reports writes @fleet report lines though no master started the
	// worker (for tools that watch a hand-run worker, such as app bench).
	Reports bool
	// Pipe is what TakeWorkerEnviron found.
	Pipe ReportPipe
	// Jobs holds the app's handlers.
	Jobs *queue.Registry
	// Stdin carries a master's commands; Stdout takes the reports of a
	// worker under a master that announced no pipe.
	Stdin  io.Reader
	Stdout io.Writer
	// Logger is the process's logger.
	Logger *slog.Logger
	// Version is the app's version, as the worker's row shows it.
	Version string
}

// RunWorker runs the worker process until it stops: at a limit, when
// empty with StopWhenEmpty, on SIGTERM or SIGINT (a second one kills the
// process at once), or, under a master (Spec.Master), when stdin closes.
// It waits for the database while it does not answer, reporting so, and
// shrinks its pool when the server has no room for it with
// database.reserve_connections kept free (see fitWorkerPool). Its
// reports go to the master's pipe, else stdout under a master (or with
// Reports), else a progress line in the log every few seconds.
//
// It returns the run's error and the status the process exits with
// (worker.Exit): 0, spawner.ExitCodeJobTimedOut, spawner.ExitCodeUnsaved,
// or 1 with any other error.
func RunWorker(ctx context.Context, p WorkerProcess) (int, error) {
	var exit worker.Exit
	err := runWorker(ctx, p, &exit)
	return exit.Code(err), err
}

func runWorker(ctx context.Context, p WorkerProcess, exit *worker.Exit) error {
	db, err := DatabaseOf(p.Config)
	if err != nil {
		return err
	}
	cfg := p.Config
	wcfg := WorkerConfig(cfg, p.Spec, p.Logger)
	wcfg.StopWhenEmpty = p.StopWhenEmpty
	log := wcfg.Logger
	underMaster := p.Spec.Master != ""
	switch {
	case (underMaster || p.Reports) && p.Pipe.Announced:
		// Started by a master: report to it on the pipe it gave us, never on
		// stdout, which is the handlers' (see package spawner).
		pipe, err := spawner.OpenReportPipe(p.Pipe.FD)
		if err != nil {
			return err
		}
		defer pipe.Close()
		wcfg.Reports = reportWriter(pipe)
	case underMaster || p.Reports:
		// Run by hand for a tool that watches it (--reports), or by a master
		// that gives no pipe: report on stdout.
		wcfg.Reports = reportWriter(p.Stdout)
	default:
		// Started by hand: a progress line for people instead.
		wcfg.Reports = progressLogger(log, progressEvery, time.Now)
	}
	// Under a master, the worker says which claimed jobs wait for a slot,
	// so that if it dies its master gives them back without an attempt.
	wcfg.ReportPrefetch = underMaster
	// The exiting report says whether outcomes were left unwritten, which
	// the exit status says too, so that the master counts the exit by its
	// reason rather than as a crash.
	wcfg.Reports = exit.Reports(wcfg.Reports)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// After the first signal a second one gets the default behaviour:
		// the process dies at once.
		<-ctx.Done()
		stop()
	}()

	pcfg := worker.ProcessConfig{
		Worker:    wcfg,
		Version:   p.Version,
		MemberTTL: time.Duration(cfg.Fleet.MasterTTLSecs) * time.Second,
	}
	if underMaster {
		// Under a master: commands arrive on stdin from the start, and
		// stdin closing means the master is gone, so stop (finishing
		// running jobs).
		pcfg.Commands = p.Stdin
	}
	proc := worker.NewProcess(pcfg)
	appName := "fleet:work " + cmp.Or(p.Spec.Worker, HostPID())
	maxConns := cmp.Or(p.Spec.MaxConns, cfg.Database.MaxConns, supervisor.WorkerConnections-1)
	if !underMaster && p.Spec.MaxConns == 0 && cfg.Database.MaxConns == 0 {
		maxConns++ // run by hand, it also beats its own membership row
	}
	var pool *pgxpool.Pool
	connected, err := proc.Connect(ctx, func(ctx context.Context) (err error) {
		if pool, err = OpenPool(ctx, db, maxConns, appName); err != nil {
			return err
		}
		// Fit in what the server has free, keeping the reserve: the
		// pool's one open connection reads it.
		if n := fitWorkerPool(ctx, pool, db, cfg, maxConns, log); n < maxConns {
			ClosePool(pool)
			if pool, err = OpenPool(ctx, db, n, appName); err != nil {
				return err
			}
		}
		return nil
	}, waitForDatabase)
	if err != nil {
		return err
	}
	if !connected {
		return nil // stopped while waiting for the database
	}
	defer ClosePool(pool)
	st, err := db.ListenStore(store.New(pool))
	if err != nil {
		return err
	}
	log.Info("database pooler", "pooler", db.Pooler, "wake_up", db.Wakeups(wcfg.PollInterval))
	_, err = proc.Run(ctx, st, p.Jobs)
	return err
}

// waitForDatabase reports whether a worker under a master waits for the
// database after a first connection that failed with err (see
// worker.Process.Connect): when the server did not answer, or answered
// with a passing refusal, such as no connection slot left or a statement
// timeout as the session opened (store.ErrorTransient); not when it
// refused the connection for good (bad credentials, no such database),
// which the worker's exit reports to its master.
func waitForDatabase(err error) bool {
	return errors.Is(err, ErrUnreachable) && store.ClassifyError(err) != store.ErrorRejected
}

// WorkerConfig is the worker spec asks for, logging to log, with what the
// spec leaves open taken from the queue section of cfg: the same
// translation (worker.SpecConfig) as a master's in-process workers get.
func WorkerConfig(cfg *config.Config, spec spawner.Spec, log *slog.Logger) worker.Config {
	return worker.SpecConfig(spec, worker.Config{
		Queues:         cfg.Queue.Queues,
		Concurrency:    cfg.Queue.Workers,
		PollInterval:   time.Duration(cfg.Queue.PollIntervalMs) * time.Millisecond,
		PrefetchHold:   time.Duration(cfg.Queue.PrefetchHoldMs) * time.Millisecond,
		Tries:          cfg.Queue.Tries,
		Backoff:        cfg.Queue.Backoff,
		DefaultTimeout: time.Duration(cfg.Queue.TimeoutSecs) * time.Second,
		TimeoutGrace:   time.Duration(cfg.Queue.TimeoutGraceSecs) * time.Second,
		PayloadBudget:  PayloadBudget(cfg.Queue.PayloadBudgetBytes),
		Logger:         log,
		Redact:         cfg.Log.Redact,
	})
}

// PayloadBudget is the worker.Config.PayloadBudget of a configured byte
// budget (queue.payload_budget_bytes, or a supervisor's): 0 turns the
// bound off.
func PayloadBudget(bytes int) int64 {
	if bytes <= 0 {
		return -1
	}
	return int64(bytes)
}

// reportWriter writes @fleet report lines to w, one whole line per write.
// A write that fails (the master is gone) is dropped: the worker learns of
// its master's end from its stdin.
func reportWriter(w io.Writer) func(spawner.Report) {
	var mu sync.Mutex
	return func(rep spawner.Report) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write(spawner.FormatReport(rep))
	}
}

// progressEvery is how often a hand-run worker logs its progress while it
// works.
const progressEvery = 5 * time.Second

// progressLogger turns a hand-run worker's heartbeats into an info line at
// most every interval while it works: attempts finished, their rate since
// the last line, jobs running. Nothing is logged while nothing changes. It
// runs in the worker's loop, which calls Reports; it needs no goroutine.
func progressLogger(log *slog.Logger, every time.Duration, now func() time.Time) func(spawner.Report) {
	var (
		lastAt      time.Time
		lastJobs    int64
		lastRunning int
		lastPaused  bool
	)
	return func(rep spawner.Report) {
		t := now()
		switch rep.Type {
		case spawner.ReportReady:
			lastAt = t
			return
		case spawner.ReportHeartbeat:
		default:
			return
		}
		if rep.Jobs == lastJobs && rep.Running == lastRunning && rep.Paused == lastPaused {
			return // idle, and nothing changed
		}
		elapsed := t.Sub(lastAt)
		if elapsed < every && rep.Running > 0 {
			return // busy: a line every interval
		}
		rate := 0.0
		if elapsed > 0 {
			rate = float64(rep.Jobs-lastJobs) / elapsed.Seconds()
		}
		log.Info("worker progress", "jobs", rep.Jobs, "jobs_per_sec", math.Round(rate*10)/10,
			"running", rep.Running, "paused", rep.Paused, "memory_mb", math.Round(rep.MemoryMB*10)/10)
		lastAt, lastJobs, lastRunning, lastPaused = t, rep.Jobs, rep.Running, rep.Paused
	}
}
