package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
)

func ExampleService_Cancel() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	svc := fleet.New(pool, fleet.Options{})
	// Recorded with the jobs as who cancelled them.
	ctx = fleet.WithActor(ctx, "ann@ops")
	res, err := svc.Cancel(ctx, 41, 42)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range res.Jobs {
		fmt.Println(j.ID, j.Outcome) // cancelled, cancel_requested or not_found
	}
}

func ExampleService_CancelQueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	res, err := fleet.New(pool, fleet.Options{}).CancelQueue(ctx, "exports")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Cancelled, "cancelled,", res.Requested, "running ones stopping")
}
