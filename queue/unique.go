package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-go/fleet/store"
)

// Unique makes a job unique: while a job with the same key counts, a
// dispatch of another inserts nothing and answers with that job's id, its
// DispatchResult's Duplicate set. The key is always the job's name, plus whatever the
// fields below add. A job with the key counts while it is in the queue
// (pending, delayed, running, or waiting for a retry) and, with Completed,
// once completed until the end of its period; a job that failed for good
// never counts. PostgreSQL enforces the key (a primary key), so dispatchers
// racing on one key insert exactly one job.
type Unique struct {
	// Key is a key of your own, e.g. "customer:42".
	Key string
	// ByArgs adds the whole payload to the key: jobs with equal payloads
	// (compared as JSON values, so key order and spacing do not matter)
	// are duplicates.
	ByArgs bool
	// Fields adds the named top-level payload fields to the key (a missing
	// field counts as null).
	Fields []string
	// ByQueue adds the queue to the key; without it a job is unique across
	// queues.
	ByQueue bool
	// Period makes the key cover one period, aligned to the Unix epoch in
	// UTC on the database clock: with an hour, one job per clock hour; the
	// next period's job is not a duplicate of this one's. At least one
	// second.
	Period time.Duration
	// Completed counts a completed job as a duplicate until the end of its
	// period ("at most once per hour"); it needs a Period.
	Completed bool
}

// Unique makes the job unique by u (see Unique).
func (j *JobSpec) Unique(u Unique) *JobSpec {
	u.Fields = append([]string(nil), u.Fields...)
	j.unique = &u
	return j
}

// MaxUniqueKeyBytes is the longest Unique.Key accepted.
const MaxUniqueKeyBytes = 500

// uniqueParams checks j's uniqueness and makes its key's base: the name,
// then each part as "|x=value". Payload parts are hashed (SHA-256 of the
// canonical JSON), so a key stays short whatever the payload.
func uniqueParams(j *JobSpec, queue string) (store.UniqueParams, error) {
	u := j.unique
	if u.Key != "" {
		if err := checkName("Unique.Key", u.Key, MaxUniqueKeyBytes); err != nil {
			return store.UniqueParams{}, err
		}
	}
	if u.Period != 0 && u.Period < time.Second {
		return store.UniqueParams{}, fmt.Errorf("%s must be at least 1s, got %s", "Unique.Period", u.Period)
	}
	if u.Completed && u.Period == 0 {
		return store.UniqueParams{}, fmt.Errorf("%s needs a Unique.Period: the period a completed job counts for", "Unique.Completed")
	}
	var b strings.Builder
	b.WriteString(j.Name)
	if u.ByQueue {
		b.WriteString("|q=" + queue)
	}
	if u.Key != "" {
		b.WriteString("|k=" + u.Key)
	}
	if u.ByArgs || len(u.Fields) > 0 {
		digest, err := argsDigest(j.Payload, u.ByArgs, u.Fields)
		if err != nil {
			return store.UniqueParams{}, fmt.Errorf("unique by payload of job %q: %w", j.Name, err)
		}
		b.WriteString("|a=" + digest)
	}
	return store.UniqueParams{Base: b.String(), Period: u.Period.Truncate(time.Millisecond), KeepCompleted: u.Completed}, nil
}

// argsDigest hashes the canonical JSON of the whole payload (all) or of
// the named fields.
func argsDigest(payload json.RawMessage, all bool, fields []string) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if !all {
		obj, _ := v.(map[string]any)
		picked := make(map[string]any, len(fields))
		for _, f := range fields {
			if f == "" {
				return "", fmt.Errorf("%s holds an empty name", "Unique.Fields")
			}
			picked[f] = obj[f]
		}
		v = picked
	}
	// encoding/json writes map keys sorted: the same value gives the same
	// bytes however it was written.
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16]), nil
}
