//go:build !unix

package spawner

import (
	"errors"
	"os"
)

// OpenReportPipe fails outside Unix, where a process cannot be given a
// descriptor beyond its standard ones.
func OpenReportPipe(string) (*os.File, error) {
	return nil, errors.New("spawner: a report pipe needs Unix")
}
