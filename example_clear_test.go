package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
)

// Clearing a queue: how many jobs it would delete, then delete them. (Not
// run: it needs a database; docs/clear.md shows the same code.)
func ExampleService_Clear() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
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
}
