// Command app is the embedding guide's application (docs/embedding.md): a
// shop whose orders send mail through fleet.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/queue"
)

// version is set at build time: go build -ldflags "-X main.version=1.4.0".
var version string

func main() {
	registry := queue.NewRegistry()
	registry.Handle("mail.send", func(ctx context.Context, job *queue.Job) error {
		var p struct {
			To string `json:"to"`
		}
		if err := job.Decode(&p); err != nil {
			return err
		}
		return send(ctx, p.To)
	})
	os.Exit(cmd.Execute(cmd.App{
		Jobs:    registry,
		Version: version, // empty: taken from the build information
		Commands: func() []*cobra.Command {
			return []*cobra.Command{setupCommand(), placeOrderCommand()}
		},
	}))
}

// send stands in for the app's mailer.
func send(ctx context.Context, to string) error {
	slog.InfoContext(ctx, "mail sent", "to", to)
	return nil
}

// schema is the app's own table, beside fleet's.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id bigserial PRIMARY KEY,
	email text NOT NULL,
	placed_at timestamptz NOT NULL DEFAULT now()
)`

// setupCommand is the app's own `app setup`: it creates the orders table.
func setupCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "setup",
		Short: "Create the app's own tables (fleet's come from app migrate)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			conn, err := pgx.Connect(ctx, os.Getenv("APP_DATABASE__URL"))
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, schema); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), "table orders ready")
			return nil
		},
	}
}

// placeOrderCommand is the app's own `app place-order EMAIL [--sql]`: the
// order and its mail job commit together, or neither.
func placeOrderCommand() *cobra.Command {
	var withSQL bool
	c := &cobra.Command{
		Use:   "place-order EMAIL",
		Short: "Store an order and dispatch its confirmation mail in one transaction",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx, url := c.Context(), os.Getenv("APP_DATABASE__URL")
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				return err
			}
			defer pool.Close()
			client := queue.NewClient(pool, queue.Defaults{})
			job := queue.NewJob("mail.send", map[string]string{"to": args[0]}).OnQueue("mail")
			var id int64
			if withSQL {
				id, err = placeWithSQL(ctx, url, client, job, args[0])
			} else {
				id, err = placeWithPgx(ctx, pool, client, job, args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), "order placed, mail job", id)
			return nil
		},
	}
	c.Flags().BoolVar(&withSQL, "sql", false, "use database/sql instead of pgx")
	return c
}

// placeWithPgx inserts the order and dispatches its job in a pgx
// transaction.
func placeWithPgx(ctx context.Context, pool *pgxpool.Pool, client *queue.Client, job *queue.JobSpec, email string) (int64, error) {
	var res queue.DispatchResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (email) VALUES ($1)`, email); err != nil {
			return err
		}
		var err error
		res, err = client.DispatchTx(ctx, tx, job)
		return err
	})
	return res.ID, err
}

// placeWithSQL does the same in a database/sql transaction over pgx's
// stdlib driver.
func placeWithSQL(ctx context.Context, url string, client *queue.Client, job *queue.JobSpec, email string) (int64, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // nothing after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (email) VALUES ($1)`, email); err != nil {
		return 0, err
	}
	res, err := client.DispatchSQLTx(ctx, tx, job)
	if err != nil {
		return 0, err
	}
	return res.ID, tx.Commit()
}
