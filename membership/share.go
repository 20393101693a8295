package membership

import (
	"hash/fnv"
	"slices"
	"strings"

	"github.com/fleet-go/fleet/store"
)

// Rank orders members for key: a stable hash order of (key, instance),
// the same in every process that holds the same members, and different
// per key so that the remainders of several budgets do not all fall to one
// member.
func Rank(key string, members []store.Member) []store.Member {
	out := slices.Clone(members)
	h := func(m store.Member) uint64 {
		f := fnv.New64a()
		f.Write([]byte(key))
		f.Write([]byte{0})
		f.Write([]byte(m.Instance))
		return f.Sum64()
	}
	slices.SortFunc(out, func(a, b store.Member) int {
		ha, hb := h(a), h(b)
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return strings.Compare(a.Instance, b.Instance)
	})
	return out
}

// Share is member's part of total among members for key: total divided
// evenly, the remainder going one each to the first members in Rank order.
// The shares of all members sum to total. A member not among members gets
// 0.
func Share(key string, total int, members []store.Member, instance string) int {
	ranked := Rank(key, members)
	i := slices.IndexFunc(ranked, func(m store.Member) bool { return m.Instance == instance })
	if i < 0 || total <= 0 {
		return 0
	}
	n := len(ranked)
	share := total / n
	if i < total%n {
		share++
	}
	return share
}
