package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/queue"
)

// How many jobs one INSERT of dispatch --count carries: at most
// dispatchBatch, and no more than fill dispatchBatchBytes with their
// payloads (at least one). The command streams: it holds one batch at a
// time, so its memory follows the batch, not --count. The server unnests a
// batch's arrays into memory of its own, up to work_mem (4 MB by default)
// before it spills to a temporary file: a batch of 2 MiB stays within it,
// one of 4 MiB spilled.
const (
	dispatchBatch      = 1000
	dispatchBatchBytes = 2 << 20
)

// dispatchBatchSize is how many copies of a job whose payload is
// payloadBytes long one INSERT carries.
func dispatchBatchSize(payloadBytes int) int {
	return max(1, min(dispatchBatch, dispatchBatchBytes/max(payloadBytes, 1)))
}

type dispatchFlags struct {
	name, queue, payload, backoff string
	limitKey                      string
	count, tries, limit, priority int
	tags                          []string
	metadata                      string
	delay, timeout                time.Duration
	asJSON                        bool
	uniqueKey                     string
	uniqueFor                     time.Duration
	uniqueByArgs, uniqueCompleted bool
}

// unique is the uniqueness the --unique-* flags ask for; nil when none.
func (f dispatchFlags) unique(c *cobra.Command) (*queue.Unique, error) {
	fl := c.Flags()
	if !fl.Changed("unique-key") && !fl.Changed("unique-for") && !f.uniqueByArgs && !f.uniqueCompleted {
		return nil, nil
	}
	if fl.Changed("unique-key") {
		if err := queue.CheckName("--unique-key", f.uniqueKey); err != nil {
			return nil, err
		}
	}
	if fl.Changed("unique-for") && f.uniqueFor < time.Second {
		return nil, usagef("--unique-for must be at least 1s, got %s", f.uniqueFor)
	}
	if f.uniqueCompleted && f.uniqueFor == 0 {
		return nil, usagef("--unique-completed needs --unique-for: the period a completed job counts for")
	}
	return &queue.Unique{Key: f.uniqueKey, ByArgs: f.uniqueByArgs, Period: f.uniqueFor, Completed: f.uniqueCompleted}, nil
}

func (r *runner) dispatchCommand() *cobra.Command {
	var f dispatchFlags
	c := &cobra.Command{
		Use:   "dispatch --name NAME [--queue Q] [--payload JSON] [--count N]",
		Short: "Dispatch jobs from the shell",
		Long: "Dispatch N copies of a job in batches, all in one transaction: " +
			"either every copy is dispatched or none is. A batch holds up to 1000 copies, " +
			"fewer of a large payload (2 MiB of payloads at most, at least one copy), and " +
			"the command holds one batch at a time, so its memory does not grow with N.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.dispatch(c, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.name, "name", "", "job name (required)")
	fl.StringVar(&f.queue, "queue", "", "queue (default queue.default_queue)")
	fl.StringVar(&f.payload, "payload", "{}", "JSON payload; @FILE reads it from a file, - from stdin")
	fl.IntVar(&f.count, "count", 1, "how many copies to dispatch")
	fl.DurationVar(&f.delay, "delay", 0, "make the jobs available after this long (e.g. 30s, 5m)")
	fl.IntVar(&f.tries, "tries", 0, "most attempts per job (default queue.tries)")
	fl.StringVar(&f.backoff, "backoff", "", "seconds before each retry, comma-separated, e.g. 1,5,30 (default queue.backoff)")
	fl.DurationVar(&f.timeout, "timeout", 0, "how long one attempt may run (default queue.timeout_secs)")
	fl.StringVar(&f.limitKey, "limit-key", "", "concurrency limit key: at most --limit jobs with this key run at once, fleet-wide")
	fl.IntVar(&f.limit, "limit", 0, "the concurrency limit of --limit-key (at least 1)")
	fl.IntVar(&f.priority, "priority", queue.DefaultPriority,
		fmt.Sprintf("priority within the queue: lower runs first (%d to %d)", queue.MinPriority, queue.MaxPriority))
	fl.StringArrayVar(&f.tags, "tag", nil, "a tag such as tenant:42 (repeat for more)")
	fl.StringVar(&f.metadata, "meta", "", "metadata: a JSON object handlers can read")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON")
	fl.StringVar(&f.uniqueKey, "unique-key", "", "make the job unique by this key (with its name): a dispatch while such a job is queued or running inserts nothing")
	fl.DurationVar(&f.uniqueFor, "unique-for", 0, "the key covers one period of this length (e.g. 1h), aligned to the clock")
	fl.BoolVar(&f.uniqueByArgs, "unique-by-args", false, "make the job unique by its payload (with its name)")
	fl.BoolVar(&f.uniqueCompleted, "unique-completed", false, "a completed job counts as a duplicate until its --unique-for period ends")
	_ = c.MarkFlagRequired("name")
	return c
}

func (r *runner) dispatch(c *cobra.Command, f dispatchFlags) error {
	// Check every argument before touching the database.
	if err := queue.CheckName("--name", f.name); err != nil {
		return err
	}
	if c.Flags().Changed("queue") {
		if err := queue.CheckQueue("--queue", f.queue); err != nil {
			return usage(err)
		}
	}
	if f.count < 1 {
		return usagef("--count must be at least 1, got %d", f.count)
	}
	if f.tries < 0 || (f.tries == 0 && c.Flags().Changed("tries")) {
		return usagef("--tries must be at least 1, got %d", f.tries)
	}
	if f.delay < 0 {
		return usagef("--delay must not be negative, got %s", f.delay)
	}
	if f.timeout < 0 {
		return usagef("--timeout must not be negative, got %s", f.timeout)
	}
	limited := c.Flags().Changed("limit-key") || c.Flags().Changed("limit")
	if limited {
		if !c.Flags().Changed("limit-key") || !c.Flags().Changed("limit") {
			return usagef("--limit-key and --limit go together: give both, e.g. --limit-key tenant:42 --limit 2")
		}
		if err := queue.CheckLimitKey("--limit-key", f.limitKey); err != nil {
			return err
		}
		if f.limit < 1 {
			return usagef("--limit must be at least 1, got %d", f.limit)
		}
	}
	if err := queue.CheckPriority("--priority", f.priority); err != nil {
		return err
	}
	tags, err := queue.ParseTags("--tag", f.tags)
	if err != nil {
		return err
	}
	var meta json.RawMessage
	if f.metadata != "" {
		meta = json.RawMessage(f.metadata)
		if !json.Valid(meta) || !strings.HasPrefix(strings.TrimSpace(f.metadata), "{") {
			return usagef(`--meta must be a JSON object, e.g. --meta '{"source":"shell"}'`)
		}
	}
	backoff, err := parseBackoff(f.backoff)
	if err != nil {
		return err
	}
	unique, err := f.unique(c)
	if err != nil {
		return err
	}
	if unique != nil && f.count != 1 {
		return usagef("--count must be 1 for a unique job (its copies would be duplicates), got %d", f.count)
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	if !c.Flags().Changed("queue") {
		if err := queue.CheckQueue("queue.default_queue", cfg.Queue.DefaultQueue); err != nil {
			return err
		}
	}
	payload, err := r.readPayload(f.payload, cfg.Queue.MaxPayloadBytes)
	if err != nil {
		return err
	}
	db, err := process.DatabaseOf(cfg)
	if err != nil {
		return err
	}
	ctx := c.Context()
	pool, err := process.OpenPool(ctx, db, 2, "fleet dispatch")
	if err != nil {
		return err
	}
	defer pool.Close()
	client := queue.NewClient(pool, clientDefaults(cfg))

	// A dispatch never changes the spec it is given: every job of the
	// batch is this one.
	spec := queue.NewJob(f.name, payload).OnQueue(f.queue).Delay(f.delay).Tries(f.tries).Timeout(f.timeout)
	if backoff != nil {
		spec.Backoff(backoff...)
	}
	if unique != nil {
		spec.Unique(*unique)
	}
	if limited {
		spec.Limit(f.limitKey, f.limit)
	}
	spec.Priority(f.priority).Tags(tags...)
	if meta != nil {
		spec.Metadata(meta)
	}
	start := time.Now()
	var first, last int64
	duplicate := false
	batch := make([]*queue.JobSpec, min(dispatchBatchSize(len(payload)), f.count))
	for i := range batch {
		batch[i] = spec
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for done := 0; done < f.count; {
			n := min(len(batch), f.count-done)
			res, err := client.DispatchManyTx(ctx, tx, batch[:n])
			if err != nil {
				return err
			}
			duplicate = res[0].Duplicate
			if done == 0 {
				first = res[0].ID
			}
			last = res[len(res)-1].ID
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
	warnUnworkedDispatch(c, pool, q)
	if duplicate {
		if f.asJSON {
			return printJSON(c.OutOrStdout(), map[string]any{"duplicate": map[string]any{"name": f.name, "queue": q, "id": first}})
		}
		fmt.Fprintf(c.OutOrStdout(), "not dispatched: job %d (%s) holds its unique key\n", first, f.name)
		return nil
	}
	if f.asJSON {
		return printJSON(c.OutOrStdout(), map[string]any{"dispatched": map[string]any{
			"count": f.count, "name": f.name, "queue": q, "first_id": first, "last_id": last,
		}})
	}
	fmt.Fprintf(c.OutOrStdout(), "dispatched %d %s job(s) to queue %q (ids %d..%d) in %s\n",
		f.count, f.name, q, first, last, elapsed.Round(time.Millisecond))
	return nil
}

// readPayload returns the --payload value: the JSON itself, @FILE (relative
// to the app's directory) or - (stdin), checked to be valid JSON of at most
// limit bytes (queue.max_payload_bytes). A larger file or stdin is not read
// past the limit.
func (r *runner) readPayload(arg string, limit int) (json.RawMessage, error) {
	what := "--payload"
	var raw []byte
	switch {
	case arg == "-":
		what = "--payload - (stdin)"
		b, err := io.ReadAll(io.LimitReader(r.app.Stdin, int64(limit)+1))
		if err != nil {
			return nil, fmt.Errorf("%s: read: %w", what, err)
		}
		raw = b
	case strings.HasPrefix(arg, "@"):
		path := strings.TrimPrefix(arg, "@")
		what = "--payload " + arg
		if path == "" {
			return nil, usagef("--payload @: name a file after @, e.g. --payload @job.json")
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(r.app.Dir, path)
		}
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		defer fh.Close()
		if raw, err = io.ReadAll(io.LimitReader(fh, int64(limit)+1)); err != nil {
			return nil, fmt.Errorf("%s: read: %w", what, err)
		}
	default:
		raw = []byte(arg)
	}
	if len(raw) > limit {
		return nil, usagef("%s: the payload is larger than queue.max_payload_bytes (%d bytes)", what, limit)
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return nil, usagef("%s is not valid JSON: %w", what, err)
	}
	return raw, nil
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
			return nil, usagef("--backoff %q: each value must be a whole number of seconds, 0 or more (e.g. 1,5,30)", s)
		}
		out[i] = n
	}
	return out, nil
}

// warnUnworkedDispatch writes a warning on stderr when no supervisor of
// any live master works queue q: the jobs are stored, but wait until a
// master that works q starts. The check is advisory: when it cannot be
// made, nothing is said.
func warnUnworkedDispatch(c *cobra.Command, pool *pgxpool.Pool, q string) {
	unworked, err := fleet.New(pool, fleet.Options{}).UnworkedQueues(c.Context(), q)
	if err != nil || len(unworked) == 0 {
		return
	}
	fmt.Fprintf(c.ErrOrStderr(), "warning: no supervisor of a live master works queue %q: its jobs wait until a master that works it starts (fleet:workload marks it unworked)\n", q)
}
