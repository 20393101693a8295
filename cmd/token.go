package cmd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
)

// tokenCommand is fleet:token with create, list and revoke: the
// dashboard's API tokens.
func (r *runner) tokenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "fleet:token create|list|revoke",
		Short: "Manage the dashboard's API tokens (view: read; operate: also retry, forget, pause, continue)",
		Long: "A token is printed once, by create; the database keeps only its SHA-256. " +
			"The dashboard (fleet.path on fleet.http.addr) and its API take it as Authorization: Bearer TOKEN.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return usagef("give a subcommand: create, list or revoke (see '%s --help')", c.CommandPath())
		},
	}
	c.AddCommand(r.tokenCreateCommand(), r.tokenListCommand(), r.tokenRevokeCommand())
	return c
}

func (r *runner) tokenCreateCommand() *cobra.Command {
	var name, ability string
	var expires time.Duration
	var asJSON bool
	c := &cobra.Command{
		Use:   "create --name NAME --ability view[,operate] [--expires 720h]",
		Short: "Create a token and print it, once",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := fleet.CheckTokenName("--name", name); err != nil {
				return usage(err)
			}
			abilities, err := fleet.ParseAbilities(ability)
			if err != nil {
				return usagef("--ability: %w", err)
			}
			if expires < 0 || (expires > 0 && expires < time.Minute) {
				return usagef("--expires must be at least 1m (or 0: never), got %s", expires)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				secret, t, err := svc.CreateToken(c.Context(), fleet.TokenParams{Name: name, Abilities: abilities, ExpiresIn: expires})
				if err != nil {
					return err
				}
				out := c.OutOrStdout()
				if asJSON {
					return printJSON(out, map[string]any{"token": secret, "name": t.Name, "abilities": t.Abilities, "created_at": t.CreatedAt, "expires_at": t.ExpiresAt})
				}
				fmt.Fprintf(out, "created token %s (%s), %s; it is shown only now:\n%s\n", t.Name, abilityList(t.Abilities), expiry(t), secret)
				return nil
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "the token's name, for listing and revoking (letters, digits, . _ - : @)")
	c.Flags().StringVar(&ability, "ability", "view", "view, or view,operate (operate implies view); fleet.view and fleet.operate name the same")
	c.Flags().DurationVar(&expires, "expires", 0, "valid for this long, e.g. 720h (0: until revoked)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the token and its details as JSON")
	_ = c.MarkFlagRequired("name")
	return c
}

func abilityList(as []fleet.Ability) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

func expiry(t fleet.Token) string {
	if t.ExpiresAt == nil {
		return "never expires"
	}
	return "expires " + t.ExpiresAt.Local().Format(time.DateTime)
}

func (r *runner) tokenListCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the tokens: name, abilities, state, created, last used, expires (never the token)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				tokens, err := svc.Tokens(c.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return printList(c.OutOrStdout(), "tokens", tokens, 0, 0)
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "NAME\tABILITIES\tSTATE\tCREATED\tLAST USED\tEXPIRES\t")
				stamp := func(at *time.Time, none string) string {
					if at == nil {
						return none
					}
					return at.Local().Format(time.DateTime)
				}
				for _, t := range tokens {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Name, abilityList(t.Abilities), t.State,
						t.CreatedAt.Local().Format(time.DateTime), stamp(t.LastUsedAt, "never"), stamp(t.ExpiresAt, "never"))
				}
				if len(tokens) == 0 {
					fmt.Fprintln(tw, "(no tokens: create one with fleet:token create --name NAME --ability view)")
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (r *runner) tokenRevokeCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "revoke NAME [--json]",
		Short: "Revoke a token at once: the next request bearing it is refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := fleet.CheckTokenName("NAME", args[0]); err != nil {
				return usage(err)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				t, err := svc.RevokeToken(c.Context(), args[0])
				if errors.Is(err, fleet.ErrTokenNotFound) {
					return &notFoundError{err: err}
				}
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(c.OutOrStdout(), map[string]any{"revoked": t.Name})
				}
				fmt.Fprintf(c.OutOrStdout(), "revoked token %s\n", t.Name)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	return c
}
