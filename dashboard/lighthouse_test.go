package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/dashboard"
)

// EnvLighthouse names a Lighthouse binary for the accessibility audit; by
// default it is looked for in .cache/lighthouse at the repository's root
// (where .ci/run installs it), then as lighthouse on PATH.
const EnvLighthouse = "FLEET_LIGHTHOUSE"

// minAccessibility is the accessibility score each audited page must reach.
const minAccessibility = 0.98

// lighthousePath finds Lighthouse, or skips the test saying why unless
// the environment requires it ("lighthouse" or "all" in EnvRequire, or
// CI=true), in which case it fails.
func lighthousePath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("Lighthouse audits in a browser, tens of seconds: runs without -short")
	}
	if p := os.Getenv(EnvLighthouse); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", EnvLighthouse, p, err)
		}
		return p
	}
	if p, err := filepath.Abs(filepath.Join("..", ".cache", "lighthouse", "node_modules", ".bin", "lighthouse")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("lighthouse"); err == nil {
		return p
	}
	const how = "install it with `npm i -E --prefix .cache/lighthouse lighthouse@12.8.2` at the repository's root " +
		"(as .ci/run does) or set " + EnvLighthouse + " to a lighthouse binary"
	if required("lighthouse") {
		t.Fatalf("the accessibility audit needs Lighthouse, which is not installed, and %s=%q CI=%q require it: %s",
			EnvRequire, os.Getenv(EnvRequire), os.Getenv("CI"), how)
	}
	t.Skip("skipped: no Lighthouse; to run the accessibility audit " + how)
	return ""
}

// signInScript is served to the audited pages only, before the page's own
// script: it puts the test's token where the page keeps one after a
// sign-in (the tab's sessionStorage), so that the audit sees the signed-in
// views, not the sign-in form. The page is otherwise the one served.
const signInScript = "/test-sign-in.js"

// TestDashboardLighthouse audits the accessibility of the signed-in
// overview and failed jobs with Lighthouse, on a desktop (--preset=desktop)
// and on a phone (its default): each must score at least 0.98.
func TestDashboardLighthouse(t *testing.T) {
	t.Parallel()
	lh := lighthousePath(t)
	chrome := chromePath(t)
	b := setup(t, dashboard.Options{})
	inner := b.srv.Config.Handler
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == signInScript:
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			fmt.Fprintf(w, "sessionStorage.setItem('fleet.token', %q);\n", b.operate)
		case r.URL.Path == "/_fleet" || r.URL.Path == "/_fleet/":
			rec := httptest.NewRecorder()
			inner.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			page := bytes.Replace(rec.Body.Bytes(), []byte("<script src="), []byte(`<script src="`+signInScript+`"></script>`+"\n<script src="), 1)
			w.WriteHeader(rec.Code)
			_, _ = w.Write(page)
		default:
			inner.ServeHTTP(w, r)
		}
	})
	for _, page := range []string{"#/", "#/failed"} {
		for _, form := range []struct {
			name  string
			flags []string
		}{
			{"desktop", []string{"--preset=desktop"}},
			{"mobile", nil},
		} {
			score := lighthouse(t, lh, chrome, b.base+"/"+page, form.flags...)
			t.Logf("Lighthouse accessibility of %s on %s: %.2f", page, form.name, score.score)
			if score.score < minAccessibility {
				t.Errorf("accessibility of %s on %s: %.2f, want at least %.2f; failing audits: %s",
					page, form.name, score.score, minAccessibility, strings.Join(score.failing, "; "))
			}
		}
	}
}

type audit struct {
	score   float64
	failing []string
}

// lighthouse runs one accessibility audit of url and reads its score and
// the audits that did not pass.
func lighthouse(t *testing.T, lh, chrome, url string, flags ...string) audit {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	chromeFlags := "--headless=new --no-sandbox --disable-gpu"
	args := append([]string{url, "--only-categories=accessibility", "--output=json", "--output-path=stdout", "--quiet",
		"--chrome-flags=" + chromeFlags}, flags...)
	cmd := exec.CommandContext(ctx, lh, args...)
	cmd.Env = append(os.Environ(), "CHROME_PATH="+chrome)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lighthouse %s: %v\n%s", url, err, stderr.String())
	}
	var report struct {
		RuntimeError *struct{ Code, Message string } `json:"runtimeError"`
		Categories   map[string]struct {
			Score *float64 `json:"score"`
			Refs  []struct {
				ID     string  `json:"id"`
				Weight float64 `json:"weight"`
			} `json:"auditRefs"`
		} `json:"categories"`
		Audits map[string]struct {
			Score   *float64 `json:"score"`
			Title   string   `json:"title"`
			Details struct {
				Items []struct {
					Node struct {
						Snippet string `json:"snippet"`
					} `json:"node"`
				} `json:"items"`
			} `json:"details"`
		} `json:"audits"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("lighthouse %s: not a JSON report: %v\n%.500s", url, err, out)
	}
	if report.RuntimeError != nil {
		t.Fatalf("lighthouse %s: %s: %s", url, report.RuntimeError.Code, report.RuntimeError.Message)
	}
	cat, ok := report.Categories["accessibility"]
	if !ok || cat.Score == nil {
		t.Fatalf("lighthouse %s: no accessibility score", url)
	}
	a := audit{score: *cat.Score}
	for _, ref := range cat.Refs {
		au := report.Audits[ref.ID]
		if ref.Weight == 0 || au.Score == nil || *au.Score >= 1 {
			continue
		}
		var nodes []string
		for _, it := range au.Details.Items {
			if it.Node.Snippet != "" && len(nodes) < 3 {
				nodes = append(nodes, it.Node.Snippet)
			}
		}
		a.failing = append(a.failing, ref.ID+" ("+au.Title+"): "+strings.Join(nodes, ", "))
	}
	return a
}
