// Package jobhook lets the worker give the jobs it runs what package
// queue's Job needs to complete itself inside a handler's transaction,
// without a public setter on queue.Job.
package jobhook

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Completer completes the running job inside tx (see queue.Job.CompleteTx).
type Completer func(ctx context.Context, tx pgx.Tx) error

// Attach gives job, a *queue.Job, its completer. Package queue sets it.
var Attach func(job any, c Completer)
