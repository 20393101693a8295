package worker

// batchSize is the most jobs one statement of a batch may take (a claim,
// a finish) while statements time out on the server: halved at every
// statement that timed out, down to one job, and doubled again after
// growAfter statements in a row that passed at the size, until it is back
// to its ceiling. A timed-out statement did nothing (the server rolled it
// back), so the same jobs are tried again at once in the smaller size.
// Without a ceiling (0) only a timeout bounds the caller's own limit; it
// is used by one goroutine.
type batchSize struct {
	// ceiling is the size with no timeout; 0: none (the caller's limit).
	ceiling int
	// cur is the size while shrunk; 0: not shrunk.
	cur int
	// passed counts statements in a row that passed at cur.
	passed int
}

// growAfter is how many statements in a row must pass at a shrunk size
// before it doubles.
const growAfter = 2

// limit is the most jobs the next statement may take, at most want (the
// caller's own limit, positive).
func (b *batchSize) limit(want int) int {
	if b.ceiling > 0 {
		want = min(want, b.ceiling)
	}
	if b.cur > 0 {
		want = min(want, b.cur)
	}
	return want
}

// shrunk reports whether a timeout holds the size below its ceiling.
func (b *batchSize) shrunk() bool { return b.cur > 0 }

// timedOut notes that a statement of n jobs timed out and returns the
// size of the statements that try them again: half of n, at least one.
func (b *batchSize) timedOut(n int) int {
	b.cur = max(1, n/2)
	b.passed = 0
	return b.cur
}

// ok notes that a statement of n jobs passed, and reports whether the
// size grew back to no limit at all.
func (b *batchSize) ok(n int) (restored bool) {
	if b.cur == 0 || n < b.cur {
		return false
	}
	b.passed++
	if b.passed < growAfter {
		return false
	}
	b.passed = 0
	b.cur *= 2
	if b.ceiling > 0 && b.cur >= b.ceiling {
		b.cur = 0
		return true
	}
	return false
}
