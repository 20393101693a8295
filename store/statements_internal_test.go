package store

import (
	"regexp"
	"strings"
	"testing"
)

// The finish statements are compiled once from their files: the variant
// that releases carries the CTEs of retries and snoozes and the other does
// not, both count on the shard range their $17 names, and every parameter
// was compiled to its position.
func TestFinishStatements(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sql      string
		releases bool
	}{
		{"finish.sql", jobFinish.sql, true},
		{"finish_ends.sql", jobFinishEnds.sql, false},
	} {
		for _, cte := range []string{"retried AS (", "locked AS (", "stopped AS ("} {
			if strings.Contains(tc.sql, cte) != tc.releases {
				t.Errorf("%s: CTE %q present %v, want %v", tc.name, cte, !tc.releases, tc.releases)
			}
		}
		if n := strings.Count(tc.sql, "queue_counter_shard($17::integer)"); n != 2 {
			t.Errorf("%s: %d shard expressions on $17, want 2 (the counters and the runtime histogram)", tc.name, n)
		}
		params := map[string]bool{}
		for _, p := range regexp.MustCompile(`\$\d+`).FindAllString(tc.sql, -1) {
			params[p] = true
		}
		if len(params) != 17 || !params["$1"] || !params["$17"] {
			t.Errorf("%s: parameters %v, want $1 to $17", tc.name, params)
		}
	}
	if writerShards+16 != completeShards {
		t.Errorf("the completing transactions' shards (%d) must follow the writers' 16 (from %d)", completeShards, writerShards)
	}
}
