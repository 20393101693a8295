package cmd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/queue"
)

// dispatchBatch is how many jobs one INSERT carries.
const dispatchBatch = 1000

type dispatchFlags struct {
	name, queue, payload, backoff string
	count, tries                  int
	delay, timeout                time.Duration
}

func (r *runner) dispatchCommand() *cobra.Command {
	var f dispatchFlags
	c := &cobra.Command{
		Use:   "dispatch --name NAME [--queue Q] [--payload JSON] [--count N]",
		Short: "Dispatch jobs from the shell",
		Long: "Dispatch N copies of a job in batches, all in one transaction: " +
			"either every copy is dispatched or none is.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.dispatch(c, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.name, "name", "", "job name (required)")
	fl.StringVar(&f.queue, "queue", "", "queue (default queue.default_queue)")
	fl.StringVar(&f.payload, "payload", "{}", "JSON payload")
	fl.IntVar(&f.count, "count", 1, "how many copies to dispatch")
	fl.DurationVar(&f.delay, "delay", 0, "make the jobs available after this long (e.g. 30s, 5m)")
	fl.IntVar(&f.tries, "tries", 0, "most attempts per job (default queue.tries)")
	fl.StringVar(&f.backoff, "backoff", "", "seconds before each retry, comma-separated, e.g. 1,5,30 (default queue.backoff)")
	fl.DurationVar(&f.timeout, "timeout", 0, "how long one attempt may run (default queue.timeout_secs)")
	_ = c.MarkFlagRequired("name")
	return c
}

func (r *runner) dispatch(c *cobra.Command, f dispatchFlags) error {
	// Check every argument before touching the database.
	if strings.TrimSpace(f.name) == "" {
		return fmt.Errorf("--name must not be empty")
	}
	if !json.Valid([]byte(f.payload)) {
		var v any
		err := json.Unmarshal([]byte(f.payload), &v)
		return fmt.Errorf("--payload is not valid JSON: %w", err)
	}
	if f.count < 1 {
		return fmt.Errorf("--count must be at least 1, got %d", f.count)
	}
	if f.tries < 0 {
		return fmt.Errorf("--tries must be at least 1, got %d", f.tries)
	}
	if f.delay < 0 {
		return fmt.Errorf("--delay must not be negative, got %s", f.delay)
	}
	if f.timeout < 0 {
		return fmt.Errorf("--timeout must not be negative, got %s", f.timeout)
	}
	backoff, err := parseBackoff(f.backoff)
	if err != nil {
		return err
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	url, err := databaseURL(cfg)
	if err != nil {
		return err
	}
	ctx := c.Context()
	pool, err := openPool(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	client := queue.NewClient(pool, clientDefaults(cfg))

	newJob := func() *queue.Job {
		j := queue.NewJob(f.name, json.RawMessage(f.payload)).OnQueue(f.queue).Delay(f.delay).Tries(f.tries).Timeout(f.timeout)
		if backoff != nil {
			j.Backoff(backoff...)
		}
		return j
	}
	start := time.Now()
	var first, last int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for done := 0; done < f.count; {
			n := min(dispatchBatch, f.count-done)
			jobs := make([]*queue.Job, n)
			for i := range jobs {
				jobs[i] = newJob()
			}
			ids, err := client.DispatchManyTx(ctx, tx, jobs)
			if err != nil {
				return err
			}
			if done == 0 {
				first = ids[0]
			}
			last = ids[len(ids)-1]
			done += n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nothing dispatched: %w", err)
	}
	q := f.queue
	if q == "" {
		q = cfg.Queue.DefaultQueue
	}
	elapsed := time.Since(start)
	fmt.Fprintf(c.OutOrStdout(), "dispatched %d %s job(s) to queue %q (ids %d..%d) in %s\n",
		f.count, f.name, q, first, last, elapsed.Round(time.Millisecond))
	return nil
}

// parseBackoff reads "1,5,30" into seconds.
func parseBackoff(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--backoff %q: each value must be a whole number of seconds, 0 or more (e.g. 1,5,30)", s)
		}
		out[i] = n
	}
	return out, nil
}
