package cmd_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
)

// TestTokenCommands: create prints the token once, list never shows it,
// revoke refuses it from then on, and bad arguments are refused naming
// the flag before the database is asked.
func TestTokenCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env, dir := dbEnv(url), t.TempDir()

	r := run(t, dir, env, "fleet:token", "create", "--name", "ops", "--ability", "view,operate", "--expires", "720h")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	token := lines[len(lines)-1]
	if r.code != 0 || !strings.HasPrefix(token, "fleet_") || !strings.Contains(r.stdout, "view, operate") || !strings.Contains(r.stdout, "expires") {
		t.Fatalf("create: %+v", r)
	}
	r = run(t, dir, env, "fleet:token", "create", "--name", "viewer", "--json")
	var created struct {
		Token     string   `json:"token"`
		Abilities []string `json:"abilities"`
		ExpiresAt *string  `json:"expires_at"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || !strings.HasPrefix(created.Token, "fleet_") ||
		strings.Join(created.Abilities, ",") != "view" || created.ExpiresAt != nil {
		t.Fatalf("create --json: %+v", r)
	}
	if r := run(t, dir, env, "fleet:token", "create", "--name", "ops"); r.code != 1 || !strings.Contains(r.stderr, "revoke it first") {
		t.Fatalf("create a taken name: %+v", r)
	}

	r = run(t, dir, env, "fleet:token", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "ops") || !strings.Contains(r.stdout, "viewer") || !strings.Contains(r.stdout, "active") {
		t.Fatalf("list: %+v", r)
	}
	r = run(t, dir, env, "fleet:token", "list", "--json")
	var listed struct {
		Tokens []map[string]any `json:"tokens"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed.Tokens) != 2 || listed.Tokens[0]["name"] != "ops" ||
		listed.Tokens[0]["last_used_at"] != nil {
		t.Fatalf("list --json: %+v", r)
	}
	for _, out := range []string{r.stdout, run(t, dir, env, "fleet:token", "list").stdout} {
		for _, secret := range []string{token, secretPart(token), secretPart(created.Token)} {
			if strings.Contains(out, secret) {
				t.Fatalf("list shows a token:\n%s", out)
			}
		}
	}

	if r := run(t, dir, env, "fleet:token", "revoke", "ops", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"revoked": "ops"`) {
		t.Fatalf("revoke: %+v", r)
	}
	if r := run(t, dir, env, "fleet:token", "revoke", "ops"); r.code != 3 || !strings.Contains(r.stderr, `no token named "ops"`) {
		t.Fatalf("revoke twice: %+v", r)
	}
	if r := run(t, dir, env, "fleet:token", "list"); !strings.Contains(r.stdout, "revoked") {
		t.Fatalf("list after revoke: %+v", r)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create"}, `"name" not set`},
		{[]string{"create", "--name", "a b"}, "--name may hold only"},
		{[]string{"create", "--name", "x", "--ability", "admin"}, `--ability: unknown ability "admin"`},
		{[]string{"create", "--name", "x", "--expires", "10s"}, "--expires must be at least 1m"},
		{[]string{"create", "--name", "x", "--expires", "soon"}, "--expires"},
		{[]string{"revoke"}, "accepts 1 arg"},
		{[]string{}, "give a subcommand"},
	} {
		// No database: refused before it is asked.
		if r := run(t, dir, nil, append([]string{"fleet:token"}, tc.args...)...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fleet:token %v: %+v, want an error with %q", tc.args, r, tc.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDashboardOnTheMaster: the master serves the dashboard beside
// /metrics under fleet.path, to a token made by fleet:token create; with
// fleet.dashboard = false it serves /metrics alone.
func TestDashboardOnTheMaster(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	r := run(t, dir, dbEnv(url), "fleet:token", "create", "--name", "ops")
	token := strings.TrimSpace(r.stdout[strings.LastIndex(strings.TrimSpace(r.stdout), "\n")+1:])
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}

	on, off := freeAddr(t), freeAddr(t)
	a := startApp(t, dir, fleetEnv(url, "APP_FLEET__HTTP__ADDR="+on, "APP_FLEET__PATH=/ops/fleet"), "fleet")
	b := startApp(t, t.TempDir(), fleetEnv(url, "APP_FLEET__HTTP__ADDR="+off, "APP_FLEET__DASHBOARD=false", "APP_FLEET__NAME=no-dashboard"), "fleet")
	eventually(t, 20*time.Second, "both listeners", func() bool {
		return strings.Contains(a.Output(), "serving the dashboard on http://"+on+"/ops/fleet") && strings.Contains(b.Output(), "serving /metrics")
	})
	if code, page := httpGet(t, "http://"+on+"/ops/fleet", ""); code != 200 || !strings.Contains(page, "/ops/fleet/assets/fleet-") {
		t.Fatalf("page: %d %s", code, page)
	}
	if code, _ := httpGet(t, "http://"+on+"/ops/fleet/api/overview", ""); code != 401 {
		t.Fatalf("overview without a token: %d", code)
	}
	eventually(t, 20*time.Second, "the overview to show both masters running", func() bool {
		code, body := httpGet(t, "http://"+on+"/ops/fleet/api/overview", token)
		return code == 200 && strings.Contains(body, `"status":"Running"`) && strings.Contains(body, `"masters":2`)
	})
	if code, _ := httpGet(t, "http://"+on+"/metrics", ""); code != 200 {
		t.Fatalf("metrics beside the dashboard: %d", code)
	}
	if code, _ := httpGet(t, "http://"+off+"/_fleet", ""); code != 404 {
		t.Fatalf("dashboard with fleet.dashboard = false: %d", code)
	}
	if code, _ := httpGet(t, "http://"+off+"/metrics", ""); code != 200 {
		t.Fatalf("metrics without the dashboard: %d", code)
	}
	if strings.Contains(b.Output(), "serving the dashboard") {
		t.Fatalf("fleet.dashboard = false still announces it:\n%s", b.Output())
	}
}

// secretPart is the secret of a token fleet_<id>_<secret>: the id is hex,
// the secret base64url, which may hold "_" itself.
func secretPart(token string) string {
	_, secret, _ := strings.Cut(strings.TrimPrefix(token, "fleet_"), "_")
	return secret
}

// TestTokenAbilitiesWithFleetPrefix: --ability takes fleet.view and
// fleet.operate for view and operate, alone or mixed with the short names.
func TestTokenAbilitiesWithFleetPrefix(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env, dir := dbEnv(url), t.TempDir()
	for name, c := range map[string]struct{ ability, want string }{
		"a": {"fleet.view", "view"},
		"b": {"fleet.operate", "view,operate"},
		"c": {"fleet.view,fleet.operate", "view,operate"},
		"d": {"view,fleet.operate", "view,operate"},
	} {
		r := run(t, dir, env, "fleet:token", "create", "--name", name, "--ability", c.ability, "--json")
		var created struct {
			Abilities []string `json:"abilities"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || strings.Join(created.Abilities, ",") != c.want {
			t.Errorf("--ability %s: %+v, want %s", c.ability, r, c.want)
		}
	}
	r := run(t, dir, env, "fleet:token", "list", "--json")
	if r.code != 0 || strings.Count(r.stdout, `"operate"`) != 3 {
		t.Errorf("list: %+v, want three tokens with operate", r)
	}
	r = run(t, dir, env, "fleet:token", "create", "--name", "e", "--ability", "fleet.admin")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown ability "fleet.admin"`) {
		t.Errorf("--ability fleet.admin: %+v, want exit 2", r)
	}
}
