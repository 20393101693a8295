// Package faults holds fleet's fault suite and nothing else: tests that
// run real masters and real children (the test binary acting as the
// application, see internal/apptest) against a PostgreSQL cluster the
// tests control, and kill, freeze, crash-loop and cut them off from the
// database: stopped, restarted, frozen with SIGSTOP, made read-only, its
// sessions terminated. Statement-level faults (writes failing, a release
// racing a completion) are injected through store.Faults.
//
// After every scenario the invariants are checked: every dispatched job
// has exactly one terminal outcome (one 'completed' history row, or one
// row in queue_failed_jobs where the scenario makes one), none ran more
// often than its lost attempts explain, none failed because of an outage,
// nothing is left reserved, and no child outlives its master by more than
// two seconds.
package faults
