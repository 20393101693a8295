package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// Clearing a queue: how many jobs it would delete, then delete them
// (docs/clear.md shows the same code).
func ExampleService_Clear() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	mail := queue.NewJob("mail.send", nil).OnQueue("mail")
	if _, err := queue.NewClient(pool, queue.Defaults{}).DispatchMany(ctx, []*queue.JobSpec{mail, mail, mail}); err != nil {
		log.Fatal(err)
	}

	svc := fleet.New(pool, fleet.Options{})

	would, err := svc.ClearCount(ctx, "mail") // how many it would delete now
	if err != nil {
		log.Fatal(err)
	}
	n, err := svc.Clear(ctx, "mail") // how many it deleted
	if err != nil {
		log.Fatalf("cleared %d job(s) of mail, then: %v", n, err)
	}
	fmt.Printf("mail held %d job(s) not running; deleted %d\n", would, n)
	// Output: mail held 3 job(s) not running; deleted 3
}
