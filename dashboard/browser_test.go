package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/queue"
)

// EnvChrome names a Chrome or Chromium binary for the browser tests; by
// default they look for chromium, chromium-browser, google-chrome and
// google-chrome-stable on PATH.
const EnvChrome = "FLEET_CHROME"

// EnvScreenshots names the directory the browser test saves its
// screenshots in (default: fleet-dashboard-screenshots in the temporary
// directory).
const EnvScreenshots = "FLEET_SCREENSHOTS"

// EnvRequire names the environment variable that lists, comma-separated,
// what the tests must find instead of skipping without it: "browser" for
// the browser tests, or "all". CI=true requires everything too. .ci/run
// sets FLEET_TEST_REQUIRE=all.
const EnvRequire = "FLEET_TEST_REQUIRE"

// required reports whether the environment says the tests needing what
// must fail, rather than skip, when it is missing.
func required(what string) bool {
	if os.Getenv("CI") == "true" {
		return true
	}
	for _, w := range strings.Split(os.Getenv(EnvRequire), ",") {
		if w = strings.TrimSpace(w); w == "all" || w == what {
			return true
		}
	}
	return false
}

// chromePath finds the browser. Without one the test is skipped, saying how
// to run it, unless the environment requires the browser tests (see
// EnvRequire), in which case it fails: there a browser test never passes
// without a browser.
func chromePath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a headless browser, seconds per page: runs without -short")
	}
	if p := os.Getenv(EnvChrome); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", EnvChrome, p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const how = "install it (`apt-get install -y chromium` on Debian, chromium-browser on Ubuntu) or set " +
		EnvChrome + " to a Chrome or Chromium binary"
	if required("browser") {
		t.Fatalf("the browser tests need Chromium, which is not installed, and %s=%q CI=%q require them: %s",
			EnvRequire, os.Getenv(EnvRequire), os.Getenv("CI"), how)
	}
	t.Skip("skipped: no Chromium; to run the browser tests " + how)
	return ""
}

// browser is a headless Chromium tab that records what must never happen:
// a JavaScript dialog, an uncaught exception, a Content-Security-Policy
// violation.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	dialogs  []string
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromePath(t)), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("lang", "en-GB"))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{ctx: bctx}
	opened := make(chan struct{}, 8)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancel()
		wg.Wait()
	})
	if err := chromedp.Listen(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
			select {
			case opened <- struct{}{}:
			default:
			}
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "uncaught: "+ev.ExceptionDetails.Text+" "+describe(ev.ExceptionDetails.Exception))
		case *cdplog.EventEntryAdded:
			if strings.Contains(ev.Entry.Text, "Content Security Policy") {
				b.problems = append(b.problems, "policy: "+ev.Entry.Text)
			}
		}
	}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	// A dialog would block the page: dismiss each (the test fails on it).
	wg.Go(func() {
		for {
			select {
			case <-bctx.Done():
				return
			case <-opened:
				_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}
		}
	})
	if _, err := chromedp.Call(bctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable the log: %v", err)
	}
	return b
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	return o.Description
}

// check fails the test for any dialog, exception or policy violation so
// far.
func (b *browser) check(t *testing.T, when string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		t.Fatalf("%s: a dialog opened: %v", when, b.dialogs)
	}
	if len(b.problems) > 0 {
		t.Fatalf("%s: %v", when, b.problems)
	}
}

// do runs steps. The page re-renders its cards on every refresh, so an
// element found by a query may be replaced before the click reaches it
// (Chromium answers "Could not find node with given id"): no event was
// dispatched then, and the steps are run again, up to three times.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	var err error
	for range 3 {
		if err = chromedp.Do(b.ctx, steps...); err == nil || !strings.Contains(err.Error(), "Could not find node with given id") {
			break
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wait polls a JavaScript condition until it holds.
func (b *browser) wait(t *testing.T, what, cond string) {
	t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s: %v\nthe page shows:\n%s", what, err, text)
	}
}

func (b *browser) eval(t *testing.T, js string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// screenshotDir is where the browser tests save their screenshots (see
// EnvScreenshots), made when missing.
func screenshotDir(t *testing.T) string {
	t.Helper()
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "fleet-dashboard-screenshots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return shots
}

func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) signIn(t *testing.T, token string) {
	t.Helper()
	b.wait(t, "the sign-in form", `!!document.querySelector('#token')`)
	b.do(t, "sign in", chromedp.SetValue(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin")))
	b.wait(t, "signed in", `!document.querySelector('#nav').hidden`)
}

// confirm answers the page's own confirmation (an HTML dialog element, not
// a JavaScript dialog).
func (b *browser) confirm(t *testing.T) {
	t.Helper()
	b.wait(t, "the confirmation", `document.querySelector('#confirm').open`)
	b.do(t, "confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
}

// TestDashboardInBrowser drives the page in headless Chromium: a deep link
// to a hostile failed job survives signing in and shows its markup as
// text; a view token sees the workload and no button; an operate token
// pauses and continues a supervisor, retries a failed job and clears a
// queue; the page says when the API is unreachable and when its token is
// revoked; no secret reaches the page, no dialog opens, no policy is
// violated. It saves desktop and phone screenshots.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	shots := screenshotDir(t)
	br := newBrowser(t)
	b := setup(t, dashboard.Options{Refresh: 400 * time.Millisecond})
	var down atomic.Bool
	inner := b.srv.Config.Handler
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && strings.Contains(r.URL.Path, "/api/") {
			// Unreachable: the connection closes without an answer.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
		}
		inner.ServeHTTP(w, r)
	})
	ctx := t.Context()

	// A deep link to a failed job, followed before signing in.
	br.do(t, "open a deep link", chromedp.Navigate(fmt.Sprintf("%s#/failed/%d", b.base, b.hostileFailed)))
	br.signIn(t, b.view)
	br.wait(t, "the failed job's story", `!!document.querySelector('#payload') && !!document.querySelector('#attempts')`)
	if got := br.eval(t, `location.hash`); got != fmt.Sprintf("#/failed/%d", b.hostileFailed) {
		t.Errorf("after sign-in the URL is %q", got)
	}
	for _, sel := range []string{"#payload", "#error", "#facts", "#attempts"} {
		if text := br.eval(t, `document.querySelector('`+sel+`').textContent`); !strings.Contains(text, hostile) {
			t.Errorf("%s does not show the markup as text: %q", sel, text)
		}
	}
	if n := br.eval(t, `String(document.querySelectorAll('img').length + ',' + document.scripts.length)`); n != "0,1" {
		t.Errorf("images, scripts on the page: %s (want 0 images and the page's own script)", n)
	}
	if n := br.eval(t, `String(document.querySelectorAll('button[data-action]').length)`); n != "0" {
		t.Errorf("a view token sees %s action buttons", n)
	}
	br.screenshot(t, shots, "desktop-failed-job.png")

	// The overview with the workload of the dispatched jobs.
	br.do(t, "open the overview", chromedp.Navigate(b.base+"#/"))
	br.wait(t, "the workload", `[...document.querySelectorAll('#workload tbody tr')].some(r => r.cells[0].textContent.startsWith('mail') && r.cells[1].textContent === '2')`)
	br.wait(t, "the master", `!!document.querySelector('[data-master="web-1"] [data-supervisor="default"]')`)
	// A queue the live master does not work is marked unworked; the
	// worked ones are not.
	if _, err := queue.NewClient(b.pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("export.run", nil).OnQueue("exports")); err != nil {
		t.Fatal(err)
	}
	br.wait(t, "exports marked unworked", `[...document.querySelectorAll('#workload tbody tr')].some(r => r.cells[0].textContent.startsWith('exports') && !!r.cells[0].querySelector('.tag.unworked'))`)
	if n := br.eval(t, `String([...document.querySelectorAll('#workload tbody tr')].filter(r => !!r.cells[0].querySelector('.tag.unworked')).length)`); n != "1" {
		t.Errorf("%s queues marked unworked, want only exports", n)
	}
	if n := br.eval(t, `String(document.querySelectorAll('button[data-action]').length)`); n != "0" {
		t.Errorf("a view token sees %s pause buttons", n)
	}
	if strings.Contains(br.eval(t, `document.documentElement.outerHTML`), secret) {
		t.Error("the page shows the secret")
	}

	// Sign out: the token leaves the tab.
	br.do(t, "sign out", chromedp.Click(chromedp.CSS("#signout")))
	br.wait(t, "the sign-in form", `!!document.querySelector('#token')`)
	if got := br.eval(t, `String(sessionStorage.getItem('fleet.token'))`); got != "null" {
		t.Errorf("after sign-out the tab keeps %q", got)
	}

	// An operate token pauses and continues a supervisor.
	br.signIn(t, b.operate)
	pauseSel := `[data-supervisor="default"] button[data-action="pause"]`
	br.wait(t, "the supervisor's pause button", `!!document.querySelector('`+pauseSel+`')`)
	br.do(t, "pause", chromedp.Click(chromedp.CSS(pauseSel)))
	br.confirm(t)
	continueSel := `[data-supervisor="default"] button[data-action="continue"]`
	br.wait(t, "the supervisor paused", `!!document.querySelector('`+continueSel+`') && document.querySelector('#paused').textContent.includes('default')`)
	if p, err := b.svc.PausedState(ctx); err != nil || len(p.Supervisors) != 1 || p.Supervisors[0] != "default" {
		t.Fatalf("paused after the click: %+v %v", p, err)
	}
	br.screenshot(t, shots, "desktop-overview.png")
	br.do(t, "continue", chromedp.Click(chromedp.CSS(continueSel)))
	br.wait(t, "the supervisor continued", `!!document.querySelector('`+pauseSel+`') && document.querySelector('#paused').textContent === 'Paused: nothing'`)
	if p, err := b.svc.PausedState(ctx); err != nil || len(p.Supervisors) != 0 {
		t.Fatalf("paused after continue: %+v %v", p, err)
	}

	// Retry a failed job from the list.
	ann := b.failedIDs["ann"]
	br.do(t, "open the failed jobs", chromedp.Navigate(b.base+"#/failed"))
	retrySel := fmt.Sprintf(`button[data-action="retry"][data-id="%d"]`, ann)
	br.wait(t, "the retry button", `!!document.querySelector('`+retrySel+`')`)
	br.do(t, "retry", chromedp.Click(chromedp.CSS(retrySel)))
	br.confirm(t)
	br.wait(t, "the retry said", fmt.Sprintf(`document.querySelector('#banner').textContent.includes('Retried failed job %d as job')`, ann))
	br.wait(t, "the retried job gone from the list", `!document.querySelector('`+retrySel+`')`)
	if _, err := b.svc.FailedJob(ctx, ann); err == nil {
		t.Fatal("the failed job is still there after its retry")
	}

	// Clear a queue from the workload table: mail's two pending jobs.
	br.do(t, "open the overview to clear", chromedp.Navigate(b.base+"#/"))
	clearSel := `button[data-action="clear"][data-queue="mail"]`
	br.wait(t, "the queue's clear button", `!!document.querySelector('`+clearSel+`')`)
	br.do(t, "clear", chromedp.Click(chromedp.CSS(clearSel)))
	br.confirm(t)
	br.wait(t, "the clear said", `document.querySelector('#banner').textContent.includes('Cleared queue mail: deleted 2 job(s).')`)
	if n, err := b.svc.ClearCount(ctx, "mail"); err != nil || n != 0 {
		t.Fatalf("mail holds %d jobs after its clear, %v", n, err)
	}

	// Metrics, drawn as SVG.
	br.do(t, "open the metrics", chromedp.Navigate(b.base+"#/metrics?period=hour"))
	br.wait(t, "the charts", `document.querySelectorAll('#charts svg path').length >= 4`)
	// The snapshots cover the last 5 minutes of the hour: the minutes
	// before them are a gap in the jobs-per-minute chart, not zeros.
	br.wait(t, "a gap in the charts", `document.querySelectorAll('#charts svg rect.gap').length >= 1`)
	br.screenshot(t, shots, "desktop-metrics.png")

	// A phone: nothing wider than the screen but the tables' own scroll.
	br.do(t, "a phone-sized window", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch),
		chromedp.Navigate(b.base+"#/"))
	br.wait(t, "the overview on a phone", `!!document.querySelector('#workload')`)
	if w := br.eval(t, `String(document.documentElement.scrollWidth <= window.innerWidth)`); w != "true" {
		t.Errorf("the overview is wider than a phone: %s > %s", br.eval(t, `String(document.documentElement.scrollWidth)`), br.eval(t, `String(window.innerWidth)`))
	}
	br.screenshot(t, shots, "phone-overview.png")
	br.do(t, "a failed job on a phone", chromedp.Navigate(fmt.Sprintf("%s#/failed/%d", b.base, b.hostileFailed)))
	br.wait(t, "the story on a phone", `!!document.querySelector('#payload')`)
	if w := br.eval(t, `String(document.documentElement.scrollWidth <= window.innerWidth)`); w != "true" {
		t.Errorf("a failed job is wider than a phone")
	}
	br.screenshot(t, shots, "phone-failed-job.png")

	// The API away, then back.
	down.Store(true)
	br.wait(t, "the page saying the API is unreachable", `document.querySelector('#banner').textContent.includes('unreachable')`)
	down.Store(false)
	br.wait(t, "the warning gone", `document.querySelector('#banner').hidden`)

	// The token revoked: the page signs out and says why.
	if _, err := b.svc.RevokeToken(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	br.wait(t, "the page saying the token was revoked", `!!document.querySelector('#signin-error') && document.querySelector('#signin-error').textContent.includes('revoked')`)

	if strings.Contains(br.eval(t, `document.documentElement.outerHTML`), secret) {
		t.Error("the page shows the secret")
	}
	br.check(t, "after the whole session")
	t.Logf("screenshots in %s", shots)
}
