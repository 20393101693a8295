package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
)

// searchBatch is how many candidate rows a search reads per statement.
const searchBatch = 500

// eachVisibleMatch calls fn, in list order (newest first), with every
// failed job matching f whose match people can see: the search must be
// found in its name, its queue, its error as redacted, or a key or value
// of its payload that is not hidden (a value under a hidden key, at any
// depth, never matches). The database narrows the candidates (it matches
// the raw columns); the redactor decides. fn returns false to stop.
func (s *Service) eachVisibleMatch(ctx context.Context, f FailedFilter, fn func(FailedJob) bool) error {
	needle := strings.ToLower(f.Search)
	for offset := 0; ; offset += searchBatch {
		jobs, err := s.st.FailedJobList(ctx, FailedFilter{Search: f.Search, Queue: f.Queue, Tag: f.Tag, Limit: searchBatch, Offset: offset})
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if s.visibleMatch(j, needle) && !fn(j) {
				return nil
			}
		}
		if len(jobs) < searchBatch {
			return nil
		}
	}
}

// visibleMatch reports whether needle (lower case) is in what people are
// shown of j.
func (s *Service) visibleMatch(j FailedJob, needle string) bool {
	has := func(x string) bool { return strings.Contains(strings.ToLower(x), needle) }
	if has(j.Name) || has(j.Queue) || has(s.redactor.Text(j.Error)) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(j.Payload))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false // shown masked whole
	}
	return s.visibleValue(v, has)
}

func (s *Service) visibleValue(v any, has func(string) bool) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s.redactor.Hides(k) {
				continue
			}
			if has(k) || s.visibleValue(x, has) {
				return true
			}
		}
	case []any:
		for _, x := range t {
			if s.visibleValue(x, has) {
				return true
			}
		}
	case string:
		return has(t)
	case json.Number:
		return has(t.String())
	case bool:
		if t {
			return has("true")
		}
		return has("false")
	case nil:
		return has("null")
	}
	return false
}

// searchedIDs returns the ids of every failed job matching f visibly.
func (s *Service) searchedIDs(ctx context.Context, f FailedFilter) ([]int64, error) {
	var ids []int64
	err := s.eachVisibleMatch(ctx, f, func(j FailedJob) bool { ids = append(ids, j.ID); return true })
	return ids, err
}
