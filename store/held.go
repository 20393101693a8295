package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Cleanup held back. A row version that a claim, a finish or a release
// leaves behind is removed (by a vacuum, or by the scans that pass it)
// only once no transaction can see it any more. A session of the same
// database whose transaction stays open (a report, a forgotten BEGIN in a
// console, a stuck handler's own transaction) keeps every such version
// from then on: fleet's tables and indexes fill with dead entries that
// the claims, the counts and the vacuums must step over. CleanupHolders
// finds such sessions, so that a master can name them (see
// master.Settings.HeldWarn) and the metrics and fleet:status show them.

// CleanupHolder is a session that holds back the cleanup of the
// database's dead rows: its transaction has a transaction id, or its
// snapshot an xmin, that every row version deleted since must be kept for.
type CleanupHolder struct {
	// PID is the session's backend process id (pg_terminate_backend takes
	// it).
	PID int `json:"pid"`
	// ApplicationName is the session's application_name (may be empty).
	ApplicationName string `json:"application_name"`
	// State is pg_stat_activity's: "idle in transaction", "active", ...
	State string `json:"state"`
	// Since is when it began to hold: its transaction's start, or, for a
	// statement that runs without a transaction id of its own, the
	// statement's start.
	Since time.Time `json:"since"`
	// Age is how long it has held, by the database's clock.
	Age time.Duration `json:"age"`
	// Query is the start of its current (or, idle, its last) statement,
	// every literal in it masked and cut to QueryShown characters: a
	// statement's values may be secrets.
	Query string `json:"query"`
}

// QueryShown is how many characters of a holder's statement are shown.
const QueryShown = 100

// heldSessions is, as a subquery h(pid, application_name, state, query,
// since), the sessions of the current database holding back cleanup, and
// since when (see CleanupHolder.Since). It reads pg_stat_activity, whose
// other sessions a role sees in full only as a superuser or with
// pg_read_all_stats: without it, the sessions of other roles are not
// seen. A plain VACUUM (its snapshot holds nothing back: cleanup ignores
// it) and autovacuum are left out.
const heldSessions = `(
		SELECT a.pid, a.application_name, a.state, a.query,
		       CASE WHEN a.backend_xid IS NULL AND a.state = 'active' THEN a.query_start ELSE a.xact_start END AS since
		FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
		  AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
		  AND a.backend_type <> 'autovacuum worker'
		  AND NOT (a.state = 'active' AND a.query ~* '^\s*vacuum\y' AND a.query !~* '^\s*vacuum\s*(\(.*full|full)')
	) h`

// cleanupHoldersSQL reads the sessions holding back cleanup for at least
// $1 milliseconds, the oldest first, at most $2 of them.
const cleanupHoldersSQL = `
	SELECT pid, COALESCE(application_name, ''), COALESCE(state, ''), since,
	       EXTRACT(EPOCH FROM now() - since)::float8, left(COALESCE(query, ''), 2000)
	FROM ` + heldSessions + `
	WHERE since IS NOT NULL AND since <= now() - $1 * interval '1 millisecond'
	ORDER BY since, pid
	LIMIT $2`

// CleanupHolders lists up to limit sessions of the database that have
// held back the cleanup of dead rows for at least minAge, the oldest
// first (see CleanupHolder). The session that asks is never among them.
func (s *Store) CleanupHolders(ctx context.Context, minAge time.Duration, limit int) ([]CleanupHolder, error) {
	rows, err := s.pool.Query(ctx, cleanupHoldersSQL, minAge.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("read the sessions holding back cleanup: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CleanupHolder, error) {
		var h CleanupHolder
		var secs float64
		err := r.Scan(&h.PID, &h.ApplicationName, &h.State, &h.Since, &secs, &h.Query)
		h.Age = time.Duration(secs * float64(time.Second))
		h.Query = MaskSQL(h.Query, QueryShown)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the sessions holding back cleanup: %w", err)
	}
	return out, nil
}

// MaskSQL returns the start of the SQL text sql, for a log line or a
// status: every string literal ('...', E'...', $tag$...$tag$) and every
// comment replaced by an ellipsis, runs of white space made one space,
// cut to at most n characters (an ellipsis marking the cut). The values
// of a statement may be secrets (a password, a token in a payload), and a
// comment may hold anything; its keywords and names are shown.
func MaskSQL(sql string, n int) string {
	var b strings.Builder
	space := false
	emit := func(s string) {
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(s)
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			space = true
			i++
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				end = len(sql) - i
			}
			i += end
			space = true
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				i = len(sql)
			} else {
				i += 2 + end + 2
			}
			space = true
		case c == '\'' || ((c == 'E' || c == 'e') && strings.HasPrefix(sql[i+1:], "'") && !identByte(prev(sql, i))):
			if c != '\'' {
				i++
			}
			i = endOfQuoted(sql, i+1, c != '\'')
			emit("'…'")
		case c == '$' && !identByte(prev(sql, i)):
			if tag, ok := dollarTag(sql[i:]); ok {
				end := strings.Index(sql[i+len(tag):], tag)
				if end < 0 {
					i = len(sql)
				} else {
					i += len(tag) + end + len(tag)
				}
				emit("'…'")
				continue
			}
			emit("$")
			i++
		default:
			_, n := utf8.DecodeRuneInString(sql[i:])
			emit(sql[i : i+n])
			i += n
		}
	}
	out := b.String()
	if utf8.RuneCountInString(out) <= n {
		return out
	}
	runes := []rune(out)
	return string(runes[:max(n-1, 0)]) + "…"
}

// prev is the byte before sql[i], or a space at the start.
func prev(sql string, i int) byte {
	if i == 0 {
		return ' '
	}
	return sql[i-1]
}

// identByte reports whether c may be part of a name or a number, so that
// a quote or dollar after it does not begin a literal (x$1, a1$).
func identByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// endOfQuoted returns the index past the quote that ends the literal whose
// text begins at i (a doubled quote is a quote within it; with backslashes, as in
// E'...', a backslash escapes the next byte), or len(sql) when it does
// not end.
func endOfQuoted(sql string, i int, backslashes bool) int {
	for i < len(sql) {
		switch {
		case backslashes && sql[i] == '\\':
			i += 2
		case sql[i] == '\'' && i+1 < len(sql) && sql[i+1] == '\'':
			i += 2
		case sql[i] == '\'':
			return i + 1
		default:
			i++
		}
	}
	return len(sql)
}
