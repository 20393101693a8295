package queue

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/fleet-go/fleet/store"
)

// MaxLimitKeyBytes is the longest concurrency limit key, in bytes.
const MaxLimitKeyBytes = store.MaxLimitKeyBytes

// NameLimitKeyPrefix starts the limit key of jobs limited by their name
// (Defaults.Limits, the [queue.limits] config): the jobs matching pattern
// "exports.*" share the key "name:exports.*".
const NameLimitKeyPrefix = "name:"

// CheckLimitKey reports whether key can be a concurrency limit key: as a
// queue name must be (not empty or only spaces, valid UTF-8, no control
// characters) and at most MaxLimitKeyBytes. The error starts with label,
// the name of the argument that carried it ("--limit-key").
func CheckLimitKey(label, key string) error { return checkName(label, key, MaxLimitKeyBytes) }

// CheckLimit reports whether key and n can be a job's concurrency limit:
// key passes CheckLimitKey and n is at least 1. The error starts with
// label, the name of the argument that carried them ("JobSpec.Limit").
func CheckLimit(label, key string, n int) error {
	if err := CheckLimitKey(label+" key", key); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%s of key %q must be at least 1, got %d", label, key, n)
	}
	return nil
}

// CheckNameLimits checks a map of job-name patterns to limits, as
// Defaults.Limits and the [queue.limits] config hold it: every pattern a
// valid path.Match pattern whose key (NameLimitKeyPrefix + pattern) passes
// CheckLimit. Errors name label[pattern], e.g. queue.limits["exports.*"].
func CheckNameLimits(label string, limits map[string]int) error {
	for _, p := range slices.Sorted(maps.Keys(limits)) {
		at := fmt.Sprintf("%s[%q]", label, p)
		if p == "" {
			return fmt.Errorf("%s: the pattern must not be empty", at)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%s: %q is not a pattern (path.Match: * any run of characters but /, ? one character, [a-z] a class): %w", at, p, err)
		}
		if err := CheckLimit(at, NameLimitKeyPrefix+p, limits[p]); err != nil {
			return err
		}
	}
	return nil
}

// nameLimit is one pattern of Defaults.Limits.
type nameLimit struct {
	pattern string
	n       int
}

// nameLimits orders Defaults.Limits for matching: longest pattern first,
// then in byte order, so that the most specific pattern wins
// ("exports.csv" before "exports.*") and the choice never depends on a
// map's order.
func nameLimits(m map[string]int) []nameLimit {
	out := make([]nameLimit, 0, len(m))
	for p, n := range m {
		out = append(out, nameLimit{pattern: p, n: n})
	}
	slices.SortFunc(out, func(a, b nameLimit) int {
		return cmp.Or(cmp.Compare(len(b.pattern), len(a.pattern)), cmp.Compare(a.pattern, b.pattern))
	})
	return out
}

// LimitFor returns the limit key and limit that Limits gives a job named
// name that sets no limit of its own: NameLimitKeyPrefix + the pattern
// that wins, and its limit; "" and 0 when no pattern matches.
func (d Defaults) LimitFor(name string) (string, int) {
	return limitFor(nameLimits(d.Limits), name)
}

// limitFor returns the limit key and limit of a job named name that set
// none of its own: the first matching pattern's, or "" and 0.
func limitFor(limits []nameLimit, name string) (string, int) {
	for _, l := range limits {
		if ok, _ := path.Match(l.pattern, name); ok {
			return NameLimitKeyPrefix + l.pattern, l.n
		}
	}
	return "", 0
}
