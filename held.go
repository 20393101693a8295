package fleet

import (
	"context"
	"time"
)

// HeldShown is the most sessions holding back cleanup that
// CleanupHolders returns: the oldest.
const HeldShown = 5

// CleanupHolder is a session of the database that holds back the cleanup
// of dead rows: its transaction stays open (a report, a forgotten BEGIN in
// a console), and every row version deleted or updated since it began,
// fleet's among them, is kept for it.
type CleanupHolder struct {
	// PID is the session's backend process id: SELECT
	// pg_terminate_backend(PID) ends it.
	PID int `json:"pid"`
	// ApplicationName is the application_name it connected with.
	ApplicationName string `json:"application_name"`
	// State is "idle in transaction", "active", ...
	State string `json:"state"`
	// Since is when it began to hold, AgeSecs for how long it has.
	Since   time.Time `json:"since"`
	AgeSecs float64   `json:"age_secs"`
	// Query is the start of its statement, its literals masked.
	Query string `json:"query"`
}

// CleanupHolders returns the sessions that have held back the cleanup of
// dead rows for at least minAge, the oldest first, at most HeldShown. It
// sees the sessions of other roles only when the service's role may read
// all of pg_stat_activity (a superuser, or a member of
// pg_read_all_stats).
func (s *Service) CleanupHolders(ctx context.Context, minAge time.Duration) ([]CleanupHolder, error) {
	hs, err := s.st.CleanupHolders(ctx, minAge, HeldShown)
	if err != nil {
		return nil, err
	}
	out := make([]CleanupHolder, len(hs))
	for i, h := range hs {
		out[i] = CleanupHolder{PID: h.PID, ApplicationName: h.ApplicationName, State: h.State, Since: h.Since,
			AgeSecs: h.Age.Seconds(), Query: h.Query}
	}
	return out, nil
}
