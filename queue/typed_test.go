package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// resize is the args of a typed job in these tests.
type resize struct {
	Path  string `json:"path"`
	Width int    `json:"width"`
	Crop  struct {
		Top int `json:"top"`
	} `json:"crop"`
}

func (resize) JobName() string { return "image.resize" }

func TestTypedJobDecodesItsArgs(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	var got resize
	queue.HandleTyped(r, func(_ context.Context, job *queue.Job, args resize) error {
		if job.Name != "image.resize" {
			t.Errorf("job name %q", job.Name)
		}
		got = args
		return nil
	})
	if names := r.Names(); len(names) != 1 || names[0] != "image.resize" {
		t.Fatalf("registered %v, want image.resize", names)
	}
	args := resize{Path: "a.png", Width: 640}
	args.Crop.Top = 7
	spec := queue.NewTypedJob(args)
	if spec.Name != "image.resize" || string(spec.Payload) != `{"path":"a.png","width":640,"crop":{"top":7}}` {
		t.Fatalf("job %q with payload %s", spec.Name, spec.Payload)
	}
	// Unknown fields are ignored: a newer dispatcher may send more.
	job := &queue.Job{Name: spec.Name, Payload: json.RawMessage(`{"path":"a.png","width":640,"crop":{"top":7},"added_later":true}`)}
	if err := r.Run(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if got != args {
		t.Fatalf("handler got %+v, want %+v", got, args)
	}
	// A job without a payload (one built by hand in a test) has zero args.
	if err := r.Run(context.Background(), &queue.Job{Name: "image.resize"}); err != nil || got != (resize{}) {
		t.Fatalf("empty payload: %v, args %+v", err, got)
	}
}

func TestTypedJobDecodeFailureNamesJobFieldAndType(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	queue.HandleTyped(r, func(context.Context, *queue.Job, resize) error {
		t.Error("the handler ran with args that did not decode")
		return nil
	})
	cases := []struct{ payload, want string }{
		{`{"path":"a.png","width":"wide"}`,
			`decode args of job 9 (image.resize) into queue_test.resize: field "width": JSON string does not fit Go type int`},
		{`{"crop":{"top":1.5}}`,
			`decode args of job 9 (image.resize) into queue_test.resize: field "crop.top": JSON number 1.5 does not fit Go type int`},
		{`[1, 2]`,
			`decode args of job 9 (image.resize) into queue_test.resize: JSON array does not fit Go type queue_test.resize`},
		{`{"path":`,
			`decode args of job 9 (image.resize) into queue_test.resize: the payload is not valid JSON`},
	}
	for _, c := range cases {
		err := r.Run(context.Background(), &queue.Job{ID: 9, Name: "image.resize", Payload: json.RawMessage(c.payload)})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("payload %s: error %v, want it to start with %q", c.payload, err, c.want)
		}
	}
	err := r.Run(context.Background(), &queue.Job{ID: 9, Name: "image.resize", Payload: json.RawMessage(`{"width":true}`)})
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || typeErr.Field != "width" {
		t.Errorf("error %v does not wrap the *json.UnmarshalTypeError of width", err)
	}
}

// fieldName is args whose JobName reads a field, which HandleTyped cannot
// register.
type fieldName struct{ name string }

func (a *fieldName) JobName() string { return a.name }

func TestHandleTypedRefusesANameFromFields(t *testing.T) {
	t.Parallel()
	defer func() {
		p := recover()
		if s, _ := p.(string); !strings.Contains(s, "JobName must not depend on fields") {
			t.Fatalf("panic %v, want one saying JobName must not depend on fields", p)
		}
	}()
	queue.HandleTyped(queue.NewRegistry(), func(context.Context, *queue.Job, *fieldName) error { return nil })
}

// TestTypedJobDispatchesWithBuilderMethods: a typed job is a JobSpec, and
// every method applies to it.
func TestTypedJobDispatchesWithBuilderMethods(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	idRes, err := c.Dispatch(ctx, queue.NewTypedJob(resize{Path: "b.png"}).OnQueue("images").Tries(5).Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	var name, q, payload string
	var tries int
	var delayed bool
	err = pool.QueryRow(ctx, `SELECT name, queue, payload::text, max_tries, available_at > now() + interval '59 minutes'
		FROM queue_jobs WHERE id = $1`, id).Scan(&name, &q, &payload, &tries, &delayed)
	if err != nil {
		t.Fatal(err)
	}
	if name != "image.resize" || q != "images" || payload != `{"crop": {"top": 0}, "path": "b.png", "width": 0}` || tries != 5 || !delayed {
		t.Fatalf("stored %s on %s, payload %s, tries %d, delayed %v", name, q, payload, tries, delayed)
	}
}

// unencodable is args encoding/json refuses.
type unencodable struct {
	C chan int `json:"c"`
}

func (unencodable) JobName() string { return "bad.args" }

func TestTypedJobEncodingErrorIsReturnedByDispatch(t *testing.T) {
	t.Parallel()
	c := queue.NewClient(pgtest.Pool(t), queue.Defaults{})
	_, err := c.Dispatch(context.Background(), queue.NewTypedJob(unencodable{}))
	if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), `encode args of job "bad.args"`) {
		t.Fatalf("dispatch error %v, want an invalid job naming bad.args", err)
	}
}

// mailArgs declares its jobs' defaults.
type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) JobName() string { return "mail.send" }

func (mailArgs) JobOpts() queue.JobOpts {
	return queue.JobOpts{
		Queue: "mail", Priority: 5, Tries: 7, Timeout: 30 * time.Second, Backoff: []int{1, 60},
		LimitKey: "smtp", Limit: 4, Tags: []string{"mail"},
	}
}

// TestTypedJobDefaults: a typed job starts from its args' JobOpts, and a
// dispatch's own settings override them, down to a priority set back to 0.
func TestTypedJobDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{Tries: 2})
	ctx := context.Background()
	res, err := c.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewTypedJob(mailArgs{To: "ann"}),
		queue.NewTypedJob(mailArgs{To: "bob"}).OnQueue("urgent").Priority(0).Tries(1).Tags("vip"),
	})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Queue    string
		Priority int
		Tries    int
		TimeoutS int
		Backoff  string
		LimitKey string
		Tags     string
	}
	read := func(id int64) row {
		var r row
		err := pool.QueryRow(ctx, `SELECT queue, priority, max_tries, (coalesce(timeout_ms, 0) / 1000)::int,
			coalesce(backoff_secs::text, ''), coalesce(limit_key, ''), coalesce(array_to_string(tags, ','), '')
			FROM queue_jobs WHERE id = $1`, id).Scan(&r.Queue, &r.Priority, &r.Tries, &r.TimeoutS, &r.Backoff, &r.LimitKey, &r.Tags)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got, want := read(res[0].ID), (row{"mail", 5, 7, 30, "{1,60}", "smtp", "mail"}); got != want {
		t.Errorf("defaults: stored %+v, want %+v", got, want)
	}
	if got, want := read(res[1].ID), (row{"urgent", 0, 1, 30, "{1,60}", "smtp", "mail,vip"}); got != want {
		t.Errorf("overridden: stored %+v, want %+v", got, want)
	}
}
