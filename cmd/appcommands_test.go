package cmd_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/cmd"
)

func TestAppCommands(t *testing.T) {
	hello := func() []*cobra.Command {
		var name string
		c := &cobra.Command{Use: "hello", RunE: func(c *cobra.Command, _ []string) error {
			c.Printf("hello %s (config %q)\n", name, c.Flag("config").Value.String())
			return nil
		}}
		c.Flags().StringVar(&name, "name", "world", "")
		return []*cobra.Command{c}
	}
	var out, errb bytes.Buffer
	code := cmd.ExecuteContext(context.Background(), cmd.App{
		Commands: hello, Args: []string{"hello", "--name", "fleet", "--config", "x.toml"}, Stdout: &out, Stderr: &errb, Environ: []string{},
	})
	if code != 0 || out.String() != "hello fleet (config \"x.toml\")\n" {
		t.Fatalf("app command: %d %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	code = cmd.ExecuteContext(context.Background(), cmd.App{Commands: hello, Args: []string{"--help"}, Stdout: &out, Stderr: &errb, Environ: []string{}})
	if code != 0 || !strings.Contains(out.String(), "hello") || !strings.Contains(out.String(), "fleet:work") {
		t.Fatalf("help lists the app's commands beside fleet's: %d %q", code, out.String())
	}
	errb.Reset()
	clash := func() []*cobra.Command {
		return []*cobra.Command{{Use: "migrate", Run: func(*cobra.Command, []string) {}}}
	}
	code = cmd.ExecuteContext(context.Background(), cmd.App{Commands: clash, Args: []string{"version"}, Stdout: &out, Stderr: &errb, Environ: []string{}})
	if code != 1 || !strings.Contains(errb.String(), `command "migrate" is already taken`) {
		t.Fatalf("clashing command: %d %q", code, errb.String())
	}
}
