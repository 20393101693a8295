// Package worker runs jobs: it claims them from PostgreSQL in batches, runs
// up to Concurrency at once from its queues in priority order, writes their
// outcomes in batches, and stops at its limits. `app fleet:work` runs one
// Worker per process; the master's in-process spawner runs several.
//
// A worker is an ordered list of services (Worker.services), each its own
// type and file, with its own state and goroutines, a time limit on every
// statement derived from its own context, and the lifecycle of package
// internal/lifecycle: Start, and a Stop that cancels its work and waits
// for it (safe before Start, twice and at once from several goroutines).
// Run starts them in this order, and stops them in the reverse:
//
//  1. writer (writer.go): the outcome writer, the worker's completer
//     (complete.go), which writes finished attempts in batches while the
//     next accumulates, and retries with backoff while the database is
//     away. It starts first and stops last: the claimer's stop drains it.
//  2. runners (runners.go): a fixed pool of Concurrency goroutines that
//     run the jobs the claimer starts. Their Stop waits for every runner
//     but those in a handler the claimer gave up on.
//  3. cancel poller (cancel.go): looks for cancel requests among the
//     running jobs when the claimer asks, every CancelPollInterval while
//     it runs jobs.
//  4. listener (listener.go): the notification connection; it wakes the
//     claimer on a dispatch to the worker's queues and hands it cancel
//     requests, and reconnects with backoff.
//  5. vacuum (vacuum.go): vacuums queue_jobs when it needs it, at start
//     and every VacuumEvery while jobs finish.
//  6. claimer (claimer.go, cancel.go, reconcile.go): the loop, the one
//     owner of the loop state. It claims and starts jobs, finishes them
//     as they end, watches their timeouts and cancels, beats and
//     reconciles. Its end ends Run, and its stop is the worker's: no new jobs, running ones
//     finish within their timeout, every outcome is written (see StopCut
//     and DrainTimeout for the bound on a frozen database). It starts last
//     and stops first, since it needs every other service while it stops.
//
// The hot path (claim, start, run, finish) is the claimer's and the
// runners': a job is one send to a runner and one back, with no lock and
// no allocation of the services' own. It is three roles: fetching (the
// claimer: slots, prefetch, backpressure), executing (execute.go: the
// executor runs the handler, and decide, a pure function, says what
// becomes of the attempt) and completing (complete.go: the completer, the
// writer, takes the outcomes). assemble builds the services in order,
// each given what it needs as it is built. The services talk through channels
// whose sends never block the claimer, and share no state but the
// claimer's count of finished attempts, which the vacuum reads.
//
// Around a Worker, Process is the runtime of a `fleet:work` process: the
// master's commands from stdin, the wait for a database that does not
// answer at start, and the membership row of a worker run by hand.
// SpecConfig turns a master's spawner.Spec into a Config, for processes
// and in-process workers alike, in one place.
//
// Times are taken from Config.Now, the worker's clock; timers and tickers
// run on real time.
package worker
