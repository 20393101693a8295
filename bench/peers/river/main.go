// Command river-bench is the River side of the peers scenario of
// "app bench": it prepares a backlog of no-op jobs in a schema of its own
// and works it with one River client, as fleet's bench asks. It is a
// module of its own, so that fleet's module never depends on River; the
// bench finds it built by bench/peers/install.sh.
//
//	river-bench -url URL -schema S prepare -jobs N
//	river-bench -url URL -schema S work -workers 2000 -fetch-cooldown 2ms
//	river-bench version
//
// prepare migrates River's tables into the schema (which must exist) and
// inserts N jobs, then prints "ready N". work runs a client on the default
// queue, prints "first UNIX_NANOS" when its first job starts, and stops
// gracefully on SIGTERM or SIGINT. The bench counts what is left. version
// prints the River version it was built with ("river v0.51.2"), which the
// bench checks against the one it pins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs are the bench's jobs: no arguments, and nothing to do.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// noopWorker works them, noting the first start.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	first func()
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.first()
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		v, err := riverVersion()
		if err != nil {
			return err
		}
		fmt.Println("river", v)
		return nil
	}
	fs := flag.NewFlagSet("river-bench", flag.ContinueOnError)
	url := fs.String("url", "", "database URL")
	schema := fs.String("schema", "", "schema of River's tables (must exist)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *url == "" || *schema == "" || fs.NArg() < 1 {
		return errors.New("usage: river-bench -url URL -schema S prepare -jobs N | work -workers N -fetch-cooldown D")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "river-bench"
	switch cmd, args := fs.Arg(0), fs.Args()[1:]; cmd {
	case "prepare":
		sub := flag.NewFlagSet("prepare", flag.ContinueOnError)
		jobs := sub.Int("jobs", 0, "jobs to insert")
		if err := sub.Parse(args); err != nil {
			return err
		}
		if *jobs < 1 {
			return fmt.Errorf("prepare -jobs must be at least 1, got %d", *jobs)
		}
		return prepare(ctx, cfg, *schema, *jobs)
	case "work":
		sub := flag.NewFlagSet("work", flag.ContinueOnError)
		workers := sub.Int("workers", 2000, "MaxWorkers of the default queue")
		cooldown := sub.Duration("fetch-cooldown", 2*time.Millisecond, "FetchCooldown")
		if err := sub.Parse(args); err != nil {
			return err
		}
		return work(ctx, cfg, *schema, *workers, *cooldown)
	default:
		return fmt.Errorf("unknown command %q: want prepare or work", cmd)
	}
}

// riverVersion is the version of River's module in the binary's build
// information.
func riverVersion() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("no build information in the binary")
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/riverqueue/river" {
			return d.Version, nil
		}
	}
	return "", errors.New("github.com/riverqueue/river is not in the binary's build information")
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func prepare(ctx context.Context, cfg *pgxpool.Config, schema string, n int) error {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: logger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River into schema %s: %w", schema, err)
	}
	client, err := river.NewClient(driver, &river.Config{Schema: schema, Logger: logger()})
	if err != nil {
		return err
	}
	const batch = 10000
	params := make([]river.InsertManyParams, batch)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	for done := 0; done < n; done += batch {
		if _, err := client.InsertManyFast(ctx, params[:min(batch, n-done)]); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
	}
	fmt.Printf("ready %d\n", n)
	return nil
}

func work(ctx context.Context, cfg *pgxpool.Config, schema string, workers int, cooldown time.Duration) error {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	var once sync.Once
	w := &noopWorker{first: func() {
		once.Do(func() { fmt.Printf("first %d\n", time.Now().UnixNano()) })
	}}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:        schema,
		Logger:        logger(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown: cooldown,
		Workers:       ws,
	})
	if err != nil {
		return err
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start the client: %w", err)
	}
	fmt.Println("started")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Stop(sctx)
}
