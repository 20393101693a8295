package process

import (
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
