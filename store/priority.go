package store

// Priorities. queue_jobs_ready_idx orders a queue's unreserved jobs by
// (priority, available_at, id), so that a claim takes the lowest priority
// first, then the oldest. Within one priority the ready jobs (available_at
// <= now()) come before the delayed ones and the parked ones (available_at
// = 'infinity'), so a range scan of one priority reads only what it
// returns. Across priorities it would not: delayed jobs of priority -5 sit
// in the index before the ready jobs of priority 0. So every statement
// that reads a queue's waiting jobs in order takes the priorities the
// queue uses from queue_counts (a few rows per priority, kept exact by
// its triggers), then range-scans each, lowest first. Reading the index
// to find the priorities instead would walk the dead entries the latest
// claims left at the head of each priority a second time.

// priorityLevels returns a CTE named lv(p): the priorities of the queue
// given by the SQL expression queue ("$1", or a column of an outer query)
// that have unreserved jobs, lowest first.
func priorityLevels(queue string) string {
	return `lv(p) AS (
		SELECT priority FROM queue_counts WHERE queue = ` + queue + `
		GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
	)`
}

// ReadyPick is the statement a claim picks its jobs with
// (sql/ready_pick.sql), $1 the queue and $2 the limit: the ids of up to $2
// ready jobs of the queue, locked (SKIP LOCKED), in the order a claim
// takes them. The bench's reference loop runs it, so that its bound picks
// rows as a claim does.
func ReadyPick() string { return readyPick.sql }

var readyPick = mustStatement("ready_pick.sql", "queue", "limit")
