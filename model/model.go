// Package model is fleet's vocabulary: the rows, errors, events and report
// format that the runtime (master, worker, store) and the operator API
// (package fleet, the commands, the dashboard) share. It holds types and
// their encoding only, no behaviour: decisions live in package decide, and
// reading and writing PostgreSQL in package store.
//
// Package fleet names the same types (fleet.FailedJob is model.FailedJob),
// so code written against either compiles against both.
package model
