package pgtest

// DropClosed drops the databases of the tests that have ended now, instead
// of with a later batch or when Main ends.
func DropClosed() error { return h.spares.flush() }
