package cmd

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// poolCloseWait bounds how long a stopping process waits for its pool to
// close. A connection whose statement was cut off is closed by pgx with a
// cancel request to the server, and pgxpool.Close waits for that, up to
// 15 s: on a frozen server, that would add 15 s to every stop.
const poolCloseWait = time.Second

// closePool closes pool, waiting at most poolCloseWait. It is the last
// thing a command does before its process exits; a close still waiting
// then ends with the process, which closes every socket.
func closePool(pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
	}
}
