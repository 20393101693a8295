package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// completeJobs dispatches jobs that succeed and works them with a real
// worker, so that they end in the history as completed attempts.
func completeJobs(t *testing.T, b *bundle, jobs ...*queue.JobSpec) {
	t.Helper()
	ctx := t.Context()
	reg := queue.NewRegistry()
	reg.Handle("done", func(context.Context, *queue.Job) error { return nil })
	if _, err := queue.NewClient(b.pool, queue.Defaults{}).DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(store.New(b.pool), reg, worker.Config{Queues: []string{"done-a", "done-b"}, StopWhenEmpty: true,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// layoutProblems is a script that lists what is wrong with the page's
// layout at the window's width: the page wider than the window, a button
// reaching past either edge, visible text smaller than 12 px.
const layoutProblems = `(() => {
  const out = [];
  const W = window.innerWidth;
  if (document.documentElement.scrollWidth > W) out.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a window of ' + W);
  for (const b of document.querySelectorAll('button, input, select')) {
    const r = b.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    if (r.left < 0 || r.right > W + 0.5) out.push((b.id || b.dataset.action || b.textContent) + ' spans ' + Math.round(r.left) + '–' + Math.round(r.right) + ' px');
  }
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const small = new Set();
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.textContent.trim()) continue;
    const el = n.parentElement;
    if (!el || !el.getClientRects().length || el.closest('[hidden], dialog:not([open]), .sr-only, thead')) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden') continue;
    const px = parseFloat(cs.fontSize);
    if (px < 12) small.add(el.tagName.toLowerCase() + '.' + el.className + ' ' + px + 'px: ' + n.textContent.trim().slice(0, 30));
  }
  out.push(...small);
  return JSON.stringify(out);
})()`

// TestDashboardLayout opens every page with an operate token in a desktop
// window and on a 390×844 phone: no page is wider than the window, every
// button is inside it, no visible text is under 12 px. It also uses the
// "go to job" field and the state and queue filters.
func TestDashboardLayout(t *testing.T) {
	t.Parallel()
	shots := screenshotDir(t)
	br := newBrowser(t)
	b := setup(t, dashboard.Options{Refresh: 400 * time.Millisecond})
	ctx := t.Context()
	completeJobs(t, b, queue.NewJob("done", nil).OnQueue("done-a"), queue.NewJob("done", nil).OnQueue("done-b"),
		queue.NewJob("done", nil).OnQueue("done-b"))
	c := queue.NewClient(b.pool, queue.Defaults{})
	delayedRes, err := c.Dispatch(ctx, queue.NewJob("mail.send", map[string]string{"to": "fay"}).OnQueue("mail").Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	delayed := delayedRes.ID
	// A long error without spaces, as a stack trace or a URL can hold.
	if _, err := b.pool.Exec(ctx, `UPDATE queue_failed_jobs SET error = 'boom: ' || repeat('x', 300) || ' at the end' WHERE id = $1`, b.failedIDs["cyd"]); err != nil {
		t.Fatal(err)
	}

	br.do(t, "open the page", chromedp.Navigate(b.base+"#/"))
	br.signIn(t, b.operate)

	pages := []struct{ name, hash, ready string }{
		{"overview", "#/", `!!document.querySelector('#workload tbody tr button[data-action="pause"]')`},
		{"pending", "#/jobs/pending", `!!document.querySelector('#view tbody tr button[data-action="cancel"]')`},
		{"completed", "#/jobs/completed", `document.querySelectorAll('#view tbody tr').length === 3`},
		{"failed", "#/failed", `!!document.querySelector('#view tbody tr button[data-action="retry"]')`},
		{"job", fmt.Sprintf("#/job/%d", b.pendingJobID), `!!document.querySelector('#facts') && !!document.querySelector('button[data-action="cancel"]')`},
		{"failed job", fmt.Sprintf("#/failed/%d", b.failedIDs["ann"]), `!!document.querySelector('#attempts') && !!document.querySelector('button[data-action="forget"]')`},
		{"metrics", "#/metrics", `document.querySelectorAll('#charts svg path').length >= 4`},
		{"periodic", "#/periodic", `document.querySelectorAll('#schedules tbody tr').length === 2`},
	}
	sizes := []struct {
		name string
		size chromedp.Action[chromedp.Void]
	}{
		{"desktop", chromedp.EmulateViewport(1280, 900)},
		{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)},
	}
	for _, sz := range sizes {
		br.do(t, "a "+sz.name+" window", sz.size)
		for _, p := range pages {
			br.do(t, "open "+p.name, chromedp.Navigate(b.base+p.hash))
			br.wait(t, p.name+" on a "+sz.name, p.ready)
			if got := br.eval(t, layoutProblems); got != "[]" {
				t.Errorf("%s on a %s: %s", p.name, sz.name, got)
			}
			br.screenshot(t, shots, "layout-"+sz.name+"-"+strings.ReplaceAll(p.name, " ", "-")+".png")
		}
		if sz.name == "phone" {
			// On a phone a row is a card of label: value lines.
			br.do(t, "open the failed jobs", chromedp.Navigate(b.base+"#/failed"))
			br.wait(t, "the failed jobs", pages[3].ready)
			if got := br.eval(t, `getComputedStyle(document.querySelector('#view tbody tr')).display + ' ' +
				getComputedStyle(document.querySelector('#view tbody td.err'), '::before').content`); got != `block "Error"` {
				t.Errorf("a failed job's row on a phone: %s, want a block with the label Error", got)
			}
		}
	}

	// Go to job: an id opens its story; anything else says what an id is.
	br.do(t, "go to a job", chromedp.SetValue(chromedp.CSS("#goto-id"), fmt.Sprint(delayed)), chromedp.Click(chromedp.CSS("#goto-go")))
	br.wait(t, "the job's story", fmt.Sprintf(`location.hash === '#/job/%d' && document.querySelector('h1').textContent === 'Job %d' && !!document.querySelector('#facts')`, delayed, delayed))
	if got := br.eval(t, `document.querySelector('#facts').textContent`); !strings.Contains(got, "delayed") {
		t.Errorf("the story of the delayed job: %s", got)
	}
	br.do(t, "go to no job", chromedp.SetValue(chromedp.CSS("#goto-id"), "abc"), chromedp.Click(chromedp.CSS("#goto-go")))
	br.wait(t, "the refusal", `document.querySelector('#banner').textContent.includes('A job id is a whole number')`)
	if got := br.eval(t, `location.hash`); got != fmt.Sprintf("#/job/%d", delayed) {
		t.Errorf("after a bad id the page moved to %s", got)
	}

	// The state filter on pending jobs, then with a queue.
	rows := `[...document.querySelectorAll('#view tbody tr')]`
	br.do(t, "open the pending jobs", chromedp.Navigate(b.base+"#/jobs/pending"))
	br.wait(t, "the pending jobs", rows+`.length === 4`)
	br.do(t, "choose delayed", chromedp.SetValue(chromedp.CSS("#state-filter"), "delayed"))
	br.eval(t, `document.querySelector('#state-filter').dispatchEvent(new Event('change')), ''`)
	br.wait(t, "only the delayed job", `location.hash.includes('state=delayed') && `+rows+`.length === 1 && `+
		rows+fmt.Sprintf(`[0].cells[0].textContent === '%d'`, delayed))
	br.do(t, "choose pending in queue default", chromedp.SetValue(chromedp.CSS("#state-filter"), "pending"),
		chromedp.SetValue(chromedp.CSS("#queue-filter"), "default"), chromedp.Click(chromedp.CSS("#filter")))
	br.wait(t, "the pending jobs of default", `location.hash.includes('state=pending') && location.hash.includes('queue=default') && `+
		rows+`.length === 1 && `+rows+`[0].cells[2].textContent === 'default' && `+rows+`[0].cells[3].textContent === 'pending'`)
	if got := br.eval(t, `document.querySelector('#state-filter').value + ' ' + document.querySelector('#queue-filter').value`); got != "pending default" {
		t.Errorf("the filters after applying them show %q", got)
	}

	// The queue filter on completed jobs.
	br.do(t, "open the completed jobs", chromedp.Navigate(b.base+"#/jobs/completed"))
	br.wait(t, "the completed jobs", rows+`.length === 3`)
	br.do(t, "filter by queue", chromedp.SetValue(chromedp.CSS("#queue-filter"), "done-b"), chromedp.Click(chromedp.CSS("#filter")))
	br.wait(t, "the completed jobs of done-b", `location.hash.includes('queue=done-b') && `+rows+`.length === 2 && `+
		rows+`.every(r => r.cells[2].textContent === 'done-b')`)
	if n := br.eval(t, `String(document.querySelectorAll('#state-filter').length)`); n != "0" {
		t.Errorf("completed jobs offer a state filter")
	}
	br.check(t, "after the layout test")
}
