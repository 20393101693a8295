package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Limits on a job's priority, tags and metadata.
const (
	// MinPriority and MaxPriority bound Job.Priority. Lower runs first;
	// DefaultPriority is in the middle, so a job can be made more urgent
	// (negative) or less (positive) than the rest.
	MinPriority = -100
	MaxPriority = 100
	// DefaultPriority is the priority of a job that sets none.
	DefaultPriority = 0
	// MaxTags is the most tags one job carries.
	MaxTags = 16
	// MaxTagBytes is the longest tag, in bytes.
	MaxTagBytes = 100
	// MaxMetadataBytes is the largest metadata, in bytes of JSON.
	MaxMetadataBytes = 16 << 10
)

// Priority orders the job among the ready jobs of its queue: a claim takes
// the lowest priority first, then the oldest. The default is 0; n must be
// within MinPriority..MaxPriority, or Dispatch refuses the job.
//
// A claim looks at each priority that the queue's waiting jobs use, so a
// queue with a few distinct priorities costs the same as one with none;
// dozens of distinct priorities in one queue make each claim look at
// dozens of them.
func (j *JobSpec) Priority(n int) *JobSpec { j.priority = n; return j }

// Tags adds labels to the job, such as "tenant:42" or "import". They are
// stored with the job, its failed copy and its history, shown by
// fleet:job, and fleet:jobs, fleet:failed and the dashboard filter by
// them. A tag must not be empty, be at most MaxTagBytes of valid UTF-8
// with no control characters; a job carries at most MaxTags (a repeated
// tag counts once). Dispatch refuses a job whose tags break these rules,
// naming the tag. Tags are shown as they are: do not put secrets in them.
func (j *JobSpec) Tags(tags ...string) *JobSpec {
	for _, t := range tags {
		if !slices.Contains(j.tags, t) {
			j.tags = append(j.tags, t)
		}
	}
	return j
}

// Metadata sets the job's metadata: free-form JSON that handlers read
// from Job.Metadata, Job.MetaString or Job.DecodeMeta, and that middleware uses to carry context
// across processes (the tracing middleware keeps its trace context
// there). v is encoded as JSON and must encode to an object; []byte and
// json.RawMessage are taken as JSON as they are. At most
// MaxMetadataBytes; Dispatch refuses the job otherwise. Metadata is
// redacted like payloads wherever it is shown.
func (j *JobSpec) Metadata(v any) *JobSpec {
	j.metadata, j.metaErr = encodeMetadata(v)
	return j
}

// SetMeta sets one key of the job's metadata to a string, keeping the
// other keys. Middleware uses it to add what it carries.
func (j *JobSpec) SetMeta(key, value string) *JobSpec {
	if j.metaErr != nil {
		return j
	}
	m := map[string]json.RawMessage{}
	if len(j.metadata) > 0 {
		if err := json.Unmarshal(j.metadata, &m); err != nil {
			j.metaErr = fmt.Errorf("metadata of job %q: %w", j.Name, err)
			return j
		}
	}
	b, _ := json.Marshal(value) // a string always encodes
	m[key] = b
	j.metadata, _ = json.Marshal(m) // a map of raw values always encodes
	return j
}

// MetaString returns the string value of one key of the job's metadata,
// or "" when the key is missing or not a string.
func (j *Job) MetaString(key string) string { return metaString(j.Metadata, key) }

// MetaString returns the string value of one key of the spec's metadata,
// or "" when the key is missing or not a string.
func (j *JobSpec) MetaString(key string) string { return metaString(j.metadata, key) }

// MetaKeys returns the keys of the spec's metadata, sorted; nil when it
// has none.
func (j *JobSpec) MetaKeys() []string {
	var m map[string]json.RawMessage
	if len(j.metadata) == 0 || json.Unmarshal(j.metadata, &m) != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

func metaString(meta json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}

// DecodeMeta unmarshals the job's metadata into v; with no metadata it
// leaves v as it is.
func (j *Job) DecodeMeta(v any) error {
	if len(j.Metadata) == 0 {
		return nil
	}
	if err := json.Unmarshal(j.Metadata, v); err != nil {
		return fmt.Errorf("decode metadata of job %d (%s): %w", j.ID, j.Name, err)
	}
	return nil
}

func encodeMetadata(v any) (json.RawMessage, error) {
	var b []byte
	switch m := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		b = m
	case []byte:
		b = m
	default:
		var err error
		if b, err = json.Marshal(m); err != nil {
			return nil, fmt.Errorf("encode metadata: %w", err)
		}
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("metadata is not valid JSON")
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("metadata must be a JSON object")
	}
	return json.RawMessage(b), nil
}

// CheckPriority reports whether n can be a job's priority. The error
// starts with label, the argument that carried it.
func CheckPriority(label string, n int) error {
	if n < MinPriority || n > MaxPriority {
		return fmt.Errorf("%s must be between %d and %d, got %d", label, MinPriority, MaxPriority, n)
	}
	return nil
}

// CheckTags reports whether tags can be a job's tags (see Job.Tags). The
// error starts with label and names the tag at fault.
func CheckTags(label string, tags []string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%s: at most %d tags, got %d", label, MaxTags, len(tags))
	}
	for i, t := range tags {
		if err := checkName(fmt.Sprintf("%s[%d]", label, i), t, MaxTagBytes); err != nil {
			return err
		}
	}
	return nil
}

// ParseTags checks tags as given on a command line (each flag value one
// tag) and returns them without repeats.
func ParseTags(label string, tags []string) ([]string, error) {
	var out []string
	for _, t := range tags {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if err := CheckTags(label, out); err != nil {
		return nil, err
	}
	return out, nil
}
