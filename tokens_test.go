package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
)

func lastUsed(t *testing.T, pool *pgxpool.Pool, name string) *time.Time {
	t.Helper()
	var at *time.Time
	if err := pool.QueryRow(context.Background(), `SELECT last_used_at FROM fleet_tokens WHERE name = $1`, name).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestTokens: a token is printed once and stored hashed; it authenticates
// with its abilities; its last use is written at most once a minute; a
// tampered, unknown, expired or revoked token is refused saying why; a
// revoked name can be taken again, a valid one cannot.
func TestTokens(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})

	secret, tok, err := svc.CreateToken(ctx, fleet.TokenParams{Name: "ops", Abilities: []fleet.Ability{fleet.AbilityOperate}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "fleet_") || !tok.Can(fleet.AbilityView) || !tok.Can(fleet.AbilityOperate) || tok.State != fleet.TokenActive {
		t.Fatalf("created %q %+v", secret, tok)
	}
	// Stored as the SHA-256 of its secret part, the token itself nowhere.
	// fleet_<id>_<secret>: the id is hex, the secret base64url (which may
	// hold "_" itself).
	_, part, _ := strings.Cut(strings.TrimPrefix(secret, "fleet_"), "_")
	var hashed, plain int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE secret_hash = sha256(convert_to($1, 'UTF8'))),
		count(*) FILTER (WHERE strpos(row_to_json(fleet_tokens)::text, $1) > 0) FROM fleet_tokens`, part).Scan(&hashed, &plain); err != nil {
		t.Fatal(err)
	}
	if hashed != 1 || plain != 0 {
		t.Fatalf("rows holding the secret's hash: %d (want 1), holding the secret: %d (want 0)", hashed, plain)
	}
	if _, _, err := svc.CreateToken(ctx, fleet.TokenParams{Name: "ops"}); !errors.Is(err, fleet.ErrTokenNameTaken) {
		t.Fatalf("a second valid token under one name: %v", err)
	}
	if _, _, err := svc.CreateToken(ctx, fleet.TokenParams{Name: "two words"}); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("a bad name: %v", err)
	}

	if lastUsed(t, pool, "ops") != nil {
		t.Fatal("used before any use")
	}
	got, err := svc.Authenticate(ctx, secret)
	if err != nil || got.Name != "ops" || !got.Can(fleet.AbilityOperate) {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	first := lastUsed(t, pool, "ops")
	if first == nil {
		t.Fatal("the first use is not recorded")
	}
	if _, err := svc.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if again := lastUsed(t, pool, "ops"); !again.Equal(*first) {
		t.Fatalf("a second use within a minute wrote again: %s then %s", first, again)
	}
	if _, err := pool.Exec(ctx, `UPDATE fleet_tokens SET last_used_at = now() - interval '2 minutes'`); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if later := lastUsed(t, pool, "ops"); !later.After(*first) {
		t.Fatalf("a use a minute later is not recorded: %s then %s", first, later)
	}

	refused := func(token, want string) {
		t.Helper()
		_, err := svc.Authenticate(ctx, token)
		if !errors.Is(err, fleet.ErrTokenInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("token %q: %v, want an invalid-token error saying %q", token, err, want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error repeats the token: %v", err)
		}
	}
	refused("", "not a fleet token")
	refused("Bearer "+secret, "not a fleet token")
	refused(secret[:len(secret)-1]+"x", "unknown token")
	refused("fleet_0000000000000000_abc", "unknown token")

	view, _, err := svc.CreateToken(ctx, fleet.TokenParams{Name: "viewer", ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := svc.Authenticate(ctx, view); err != nil || v.Can(fleet.AbilityOperate) || v.ExpiresAt == nil {
		t.Fatalf("view token: %+v %v", v, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE fleet_tokens SET expires_at = now() - interval '1 second' WHERE name = 'viewer'`); err != nil {
		t.Fatal(err)
	}
	refused(view, "expired")

	if _, err := svc.RevokeToken(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	refused(secret, "revoked")
	if _, err := svc.RevokeToken(ctx, "ops"); !errors.Is(err, fleet.ErrTokenNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	list, err := svc.Tokens(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "ops" || list[0].State != fleet.TokenRevoked || list[1].State != fleet.TokenExpired {
		t.Fatalf("tokens: %+v %v", list, err)
	}
	// A revoked name is free again; the new token works, the old stays refused.
	renewed, _, err := svc.CreateToken(ctx, fleet.TokenParams{Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	refused(secret, "unknown token")
}

func TestParseAbilities(t *testing.T) {
	for in, want := range map[string]string{"view": "view", "operate": "view,operate", "view,operate": "view,operate", " operate , view ": "view,operate",
		"fleet.view": "view", "fleet.operate": "view,operate", "fleet.view,fleet.operate": "view,operate", "fleet.operate,view": "view,operate"} {
		got, err := fleet.ParseAbilities(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		var s []string
		for _, a := range got {
			s = append(s, string(a))
		}
		if strings.Join(s, ",") != want {
			t.Errorf("%q: %v, want %s", in, s, want)
		}
	}
	for _, bad := range []string{"", "admin", "view,", "fleet.", "fleet.admin", "fleetview", "fleet.fleet.view"} {
		if _, err := fleet.ParseAbilities(bad); err == nil || !strings.Contains(err.Error(), "ability") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
