// The fleet dashboard: plain JavaScript, no build step. Every string that
// comes from the API reaches the page as text (text nodes and textContent),
// never as HTML. The token lives in sessionStorage only, and travels in the
// Authorization header only.
'use strict';

(() => {
  const body = document.body;
  const API = body.dataset.api;
  const REFRESH = Math.max(Number(body.dataset.refresh) || 5000, 500);
  const TOKEN_KEY = 'fleet.token';
  const main = document.getElementById('main');
  const banner = document.getElementById('banner');
  const nav = document.getElementById('nav');
  const who = document.getElementById('who');
  const signoutButton = document.getElementById('signout');
  const dialog = document.getElementById('confirm');
  const gotoForm = document.getElementById('goto');
  const gotoInput = document.getElementById('goto-id');

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let abilities = [];
  let timer = 0;
  let generation = 0; // bumped by every route change: late answers of an old view are dropped
  let view = null;

  // ---- building the page ---------------------------------------------

  // h builds an element. attrs: class, text, on<event> handlers, or
  // attributes (set with setAttribute, never parsed as HTML). Children
  // that are not nodes become text nodes.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    add(el, kids);
    return el;
  }

  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    setAttrs(el, attrs);
    add(el, kids);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function add(el, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
  }

  const can = (a) => abilities.includes(a);

  // link builds an in-page link to a route; parts are encoded.
  function link(route, query, ...kids) {
    return h('a', { href: href(route, query) }, ...kids);
  }

  function href(route, query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query || {})) {
      if (v !== '' && v !== undefined && v !== null) q.set(k, String(v));
    }
    const s = q.toString();
    return '#' + route + (s ? '?' + s : '');
  }

  // ---- formatting ----------------------------------------------------

  function secs(s) {
    if (s === null || s === undefined || !isFinite(s)) return '—';
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' m ' + Math.floor(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' m';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  const ms = (v) => (v === null || v === undefined ? '—' : v < 1000 ? round(v, v < 10 ? 1 : 0) + ' ms' : secs(v / 1000));
  const round = (v, places) => Number(v.toFixed(places)).toLocaleString();
  const num = (v) => (v === null || v === undefined ? '—' : Number(v).toLocaleString());

  function when(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return isNaN(d) ? String(iso) : d.toLocaleString();
  }

  function ago(iso, at) {
    if (!iso) return '—';
    const s = ((at ? new Date(at) : new Date()) - new Date(iso)) / 1000;
    return s >= 0 ? secs(s) + ' ago' : 'in ' + secs(-s);
  }

  const tag = (text, cls) => h('span', { class: 'tag ' + (cls || text) }, text);

  // ---- the API -------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, payload) {
    const headers = { Authorization: 'Bearer ' + token, Accept: 'application/json' };
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (payload !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(payload);
    }
    let res;
    try {
      res = await fetch(API + path, init);
    } catch (e) {
      throw new ApiError(0, 'The API is unreachable (' + (e && e.message ? e.message : 'network error') + ').');
    }
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    const message = (data && data.error) || res.status + ' ' + res.statusText;
    if (res.status === 401) {
      signOut('The server refused the token: ' + message.replace(/^unauthenticated: /, '') + '. Sign in with a valid token.');
      throw new ApiError(401, message);
    }
    if (!res.ok) throw new ApiError(res.status, message);
    return data;
  }

  function showBanner(text, info) {
    banner.textContent = text;
    banner.classList.toggle('info', !!info);
    banner.hidden = false;
  }

  function hideBanner() {
    banner.hidden = true;
    banner.textContent = '';
  }

  // failure says what went wrong in a banner; a 401 has signed out already.
  function failure(e) {
    if (e instanceof ApiError && e.status === 401) return;
    if (e instanceof ApiError && e.status === 0) {
      showBanner(e.message + ' Retrying every ' + Math.round(REFRESH / 1000) + ' s; what you see may be out of date.');
      return;
    }
    showBanner(e instanceof ApiError ? 'Error ' + e.status + ': ' + e.message : String(e));
  }

  // ---- signing in and out --------------------------------------------

  function signOut(message) {
    token = '';
    abilities = [];
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(timer);
    generation++;
    view = null;
    nav.hidden = true;
    gotoForm.hidden = true;
    signoutButton.hidden = true;
    who.textContent = '';
    hideBanner();
    showSignIn(message);
  }

  function showSignIn(message) {
    const input = h('textarea', {
      id: 'token', autocomplete: 'off', spellcheck: 'false', placeholder: 'fleet_…',
      'aria-label': 'API token',
    });
    const error = h('p', { class: 'error', id: 'signin-error', role: 'alert' }, message || '');
    const submit = h('button', { type: 'button', class: 'primary', id: 'signin' }, 'Sign in');
    const go = async () => {
      const t = input.value.trim();
      if (!t) {
        error.textContent = 'Paste a token first.';
        return;
      }
      submit.disabled = true;
      error.textContent = '';
      token = t;
      try {
        await signIn();
      } catch (e) {
        token = '';
        if (!(e instanceof ApiError && e.status === 401)) error.textContent = e.message;
      } finally {
        submit.disabled = false;
      }
    };
    submit.addEventListener('click', go);
    input.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey) {
        ev.preventDefault();
        go();
      }
    });
    main.replaceChildren(h('section', { class: 'panel signin' },
      h('h1', null, 'Sign in to fleet'),
      h('p', { class: 'hint' }, 'Paste a dashboard token. Create one on a host with ',
        h('code', null, 'app fleet:token create --name NAME --ability view'),
        ' (add ', h('code', null, 'operate'), ' to retry, forget, cancel, pause and clear). It is kept in this tab only.'),
      input, error, h('div', { class: 'actions' }, submit)));
    input.focus();
  }

  async function signIn() {
    const me = await api('GET', 'me');
    abilities = me.abilities || [];
    sessionStorage.setItem(TOKEN_KEY, token);
    nav.hidden = false;
    gotoForm.hidden = false;
    signoutButton.hidden = false;
    who.textContent = can('operate') ? 'signed in: view and operate' : 'signed in: view only';
    route();
  }

  signoutButton.addEventListener('click', () => signOut('Signed out.'));

  // The "go to job" field opens a job's story by its id (#/job/ID).
  gotoForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = gotoInput.value.trim().replace(/^#/, '');
    if (!/^[0-9]+$/.test(id) || Number(id) < 1) {
      showBanner('A job id is a whole number from 1, not "' + id + '".');
      gotoInput.focus();
      return;
    }
    gotoInput.value = '';
    location.hash = href('/job/' + id);
  });

  // ---- confirmation --------------------------------------------------

  function confirmAction(text, label) {
    return new Promise((resolve) => {
      const ok = document.getElementById('confirm-ok');
      const cancel = document.getElementById('confirm-cancel');
      document.getElementById('confirm-text').textContent = text;
      ok.textContent = label || 'Confirm';
      const done = (answer) => {
        ok.onclick = cancel.onclick = dialog.oncancel = null;
        if (dialog.open) dialog.close();
        resolve(answer);
      };
      ok.onclick = () => done(true);
      cancel.onclick = () => done(false);
      dialog.oncancel = () => done(false);
      dialog.showModal();
      cancel.focus();
    });
  }

  // act runs an operate request, says what it did, and refreshes.
  async function act(method, path, payload, said) {
    try {
      const res = await api(method, path, payload);
      showBanner(said(res), true);
      refresh(true);
      return res;
    } catch (e) {
      failure(e);
      return null;
    }
  }

  // ---- routing and refreshing ----------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, '') || '/';
    const [path, qs] = raw.split('?', 2);
    return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(qs || '') };
  }

  function route() {
    if (!token) return;
    clearTimeout(timer);
    generation++;
    const { parts, query } = parseHash();
    const [a, b] = parts;
    let navKey = 'overview';
    if (!a) view = overviewView();
    else if (a === 'jobs' && (b === 'pending' || b === 'completed')) {
      view = jobsView(b, query);
      navKey = b;
    } else if ((a === 'job' && b) || (a === 'jobs' && /^[0-9]+$/.test(b || ''))) {
      view = storyView('jobs/' + encodeURIComponent(b), null);
      navKey = '';
    } else if (a === 'failed' && b) {
      view = storyView('failed/' + encodeURIComponent(b), b);
      navKey = 'failed';
    } else if (a === 'failed') {
      view = failedView(query);
      navKey = 'failed';
    } else if (a === 'metrics') {
      view = metricsView(query);
      navKey = 'metrics';
    } else if (a === 'periodic') {
      view = periodicView();
      navKey = 'periodic';
    } else {
      view = { title: 'Not found', load: async () => null, draw: () => h('p', null, 'There is no such page. ', link('/', null, 'Back to the overview')) };
      navKey = '';
    }
    for (const el of nav.querySelectorAll('a')) el.classList.toggle('on', el.dataset.nav === navKey);
    view.region = h('div', { id: 'view' });
    view.last = undefined;
    document.title = view.title + ' · fleet';
    main.replaceChildren(h('h1', null, view.title), ...(view.head ? view.head() : []), view.region);
    refresh(false);
  }

  // refresh loads the view's data and redraws it when it changed, in one
  // replaceChildren (no flicker); then it schedules the next refresh while
  // the tab is visible.
  async function refresh(keepBanner) {
    clearTimeout(timer);
    if (!view || !token) return;
    const mine = generation;
    const v = view;
    try {
      const data = await v.load();
      if (mine !== generation) return;
      const key = JSON.stringify(data);
      if (key !== v.last) {
        v.last = key;
        v.region.replaceChildren(v.draw(data));
      }
      if (!keepBanner && !banner.classList.contains('info')) hideBanner();
    } catch (e) {
      if (mine !== generation) return;
      failure(e);
      if (e instanceof ApiError && e.status === 404 && v.last === undefined) {
        v.region.replaceChildren(h('p', { class: 'empty' }, e.message));
      }
    }
    if (mine === generation && !document.hidden && token) timer = setTimeout(() => refresh(false), REFRESH);
  }

  document.addEventListener('visibilitychange', () => {
    if (document.hidden) clearTimeout(timer);
    else refresh(false);
  });
  window.addEventListener('hashchange', () => {
    hideBanner();
    route();
  });

  // ---- tables --------------------------------------------------------

  function table(columns, rows, empty) {
    if (!rows.length) return h('div', { class: 'scroll' }, h('p', { class: 'empty' }, empty));
    return h('div', { class: 'scroll' }, h('table', null,
      h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.cls || null, scope: 'col' }, c.title)))),
      h('tbody', null, rows.map((r) => h('tr', null, columns.map((c) => h('td', { class: c.cls || null, 'data-label': c.title }, c.cell(r))))))));
  }

  function pager(page, hasMore, go, note) {
    return h('div', { class: 'pager' },
      h('button', { type: 'button', class: 'small', disabled: page <= 1, onclick: () => go(page - 1) }, '‹ Newer'),
      h('span', null, 'page ' + page + (note ? ' · ' + note : '')),
      h('button', { type: 'button', class: 'small', disabled: !hasMore, onclick: () => go(page + 1) }, 'Older ›'));
  }

  const firstLine = (s) => {
    const line = String(s || '').split('\n', 1)[0];
    return line.length > 160 ? line.slice(0, 160) + '…' : line;
  };

  // ---- overview ------------------------------------------------------

  function pauseButton(kind, name, paused) {
    if (!can('operate')) return null;
    const payload = kind === 'all' ? undefined : { [kind]: name };
    const what = kind === 'all' ? 'every supervisor' : kind + ' ' + name;
    if (paused) {
      return h('button', {
        type: 'button', class: 'small', 'data-action': 'continue', 'data-kind': kind, 'data-name': name || '',
        onclick: () => act('POST', 'continue', payload, () => 'Continued ' + what + '; every master applies it within a tick.'),
      }, kind === 'all' ? 'Continue all' : 'Continue');
    }
    return h('button', {
      type: 'button', class: 'small', 'data-action': 'pause', 'data-kind': kind, 'data-name': name || '',
      onclick: async () => {
        if (await confirmAction('Pause ' + what + '? Running jobs finish; no new job starts until you continue.', 'Pause')) {
          act('POST', 'pause', payload, () => 'Paused ' + what + '; every master applies it within a tick.');
        }
      },
    }, kind === 'all' ? 'Pause all' : 'Pause');
  }

  // clearButton deletes a queue's jobs that are not running, after the
  // page's own confirmation; none when the queue has no such job.
  function clearButton(q) {
    const n = q.pending + q.delayed + (q.limited || 0);
    if (!can('operate') || n === 0) return null;
    return h('button', {
      type: 'button', class: 'small danger', 'data-action': 'clear', 'data-queue': q.queue,
      onclick: async () => {
        if (!(await confirmAction('Clear queue ' + q.queue + '? Its ' + num(n) + ' job(s) that are not running (pending, delayed, limited) ' +
          'are deleted for good; running jobs finish.', 'Clear'))) return;
        act('POST', 'queues/' + encodeURIComponent(q.queue) + '/clear', undefined,
          (x) => 'Cleared queue ' + q.queue + ': deleted ' + num(x.deleted) + ' job(s).');
      },
    }, 'Clear');
  }

  function overviewView() {
    return {
      title: 'Overview',
      load: async () => {
        const [overview, workload, masters] = await Promise.all([api('GET', 'overview'), api('GET', 'workload'), api('GET', 'masters')]);
        return { overview, workload, masters };
      },
      draw: ({ overview: o, workload: w, masters: m }) => {
        const stat = (label, value, sub, cls) => h('div', { class: 'stat' },
          h('div', { class: 'label' }, label), h('div', { class: 'value ' + (cls || '') }, value), sub ? h('div', { class: 'sub' }, sub) : null);
        const paused = o.paused;
        const stats = h('div', { class: 'stats', id: 'stats' },
          stat('Status', o.status, o.masters + ' master' + (o.masters === 1 ? '' : 's') + ' live', 'status-' + o.status),
          stat('Jobs per minute', num(o.jobs_per_minute), 'last complete minute'),
          stat('Jobs past hour', num(o.jobs_past_hour)),
          stat('Failed past 7 days', link('/failed', null, num(o.failed_past_7_days))),
          stat('Processes', num(o.processes)),
          stat('Longest wait', o.longest_wait ? secs(o.longest_wait.wait_secs) : '—', o.longest_wait ? o.longest_wait.queue : 'no job waiting'),
          stat('Busiest queue', o.busiest_queue ? o.busiest_queue.queue : '—', o.busiest_queue ? num(o.busiest_queue.jobs_per_minute) + ' jobs/min' : 'nothing ran'),
          stat('Slowest queue', o.slowest_queue ? o.slowest_queue.queue : '—', o.slowest_queue ? ms(o.slowest_queue.avg_runtime_ms) + ' average' : 'nothing ran'));
        const pausedParts = [];
        if (paused.all) pausedParts.push('every supervisor');
        if (paused.supervisors.length) pausedParts.push('supervisors ' + paused.supervisors.join(', '));
        if (paused.queues.length) pausedParts.push('queues ' + paused.queues.join(', '));
        const pauseLine = h('div', { class: 'toolbar' },
          h('span', { id: 'paused' }, 'Paused: ' + (pausedParts.length ? pausedParts.join('; ') : 'nothing')),
          pauseButton('all', '', paused.all));
        const queues = table([
          { title: 'Queue', cls: 'name', cell: (q) => [link('/jobs/pending', { queue: q.queue }, q.queue), q.paused ? tag('paused') : null,
            q.unworked ? h('span', { class: 'tag unworked', title: 'no supervisor of a live master works this queue: its jobs wait until a master that works it starts' }, 'unworked') : null,
            q.paused_supervisors.length ? h('span', { class: 'muted' }, ' (paused in ' + q.paused_supervisors.join(', ') + ')') : null] },
          { title: 'Pending', cls: 'num', cell: (q) => num(q.pending) },
          { title: 'Delayed', cls: 'num', cell: (q) => num(q.delayed) },
          { title: 'Running', cls: 'num', cell: (q) => num(q.reserved) },
          { title: 'Oldest wait', cls: 'num', cell: (q) => secs(q.oldest_wait_secs) },
          { title: 'Avg runtime', cls: 'num', cell: (q) => ms(q.avg_runtime_ms) },
          { title: 'Workload', cls: 'num', cell: (q) => secs(q.workload_secs) },
          { title: 'Processes', cls: 'num', cell: (q) => num(q.processes) },
          { title: 'Jobs/min', cls: 'num', cell: (q) => num(q.jobs_per_minute) },
          ...(can('operate') ? [{ title: 'Actions', cls: 'act', cell: (q) => h('span', { class: 'row-actions' }, pauseButton('queue', q.queue, q.paused), clearButton(q)) }] : []),
        ], w.queues, 'No queue has jobs, recent history or processes.');
        queues.id = 'workload';
        const masters = m.masters.length
          ? h('div', { class: 'masters', id: 'masters' }, m.masters.map((x) => masterCard(x, m.at, paused)))
          : h('p', { class: 'empty panel', id: 'masters' }, 'No master is live. Start one with app fleet.');
        return h('div', null, stats, h('h2', null, 'Workload'), pauseLine, queues, h('h2', null, 'Masters'), masters);
      },
    };
  }

  function masterCard(x, at, paused) {
    const sups = Array.isArray(x.supervisors) ? x.supervisors : [];
    return h('section', { class: 'panel master', 'data-master': x.name },
      h('h3', null, x.name, tag(x.liveness), x.state !== x.liveness ? tag(x.state) : null),
      h('div', { class: 'meta' }, x.host + ' · pid ' + x.pid + (x.version ? ' · ' + x.version : '') + ' · up ' + ago(x.started_at, at).replace(/ ago$/, '') +
        ' · beat ' + secs(x.beat_age_secs) + ' ago · ' + num(x.processes) + ' processes'),
      sups.length ? sups.map((s) => {
        const held = paused.all || (paused.supervisors || []).includes(s.name);
        const groups = Object.entries(s.processes || {}).map(([g, n]) => g + ': ' + n).join(' · ');
        return h('div', { class: 'sup', 'data-supervisor': s.name },
          h('div', { class: 'sup-head' },
            h('span', null, h('span', { class: 'sup-name' }, s.name), s.balance ? tag(s.balance, 'balance') : null,
              s.paused ? tag('paused') : held ? tag('pausing', 'paused') : null),
            paused.all ? null : pauseButton('supervisor', s.name, held)),
          h('div', { class: 'groups' }, 'queues ' + (s.queues || []).join(', ') + (groups ? ' — processes ' + groups : '')));
      }) : h('p', { class: 'muted' }, 'No supervisors reported yet.'));
  }

  // ---- job lists -----------------------------------------------------

  function queueFilter(query, route, extra, withTag) {
    const input = h('input', { type: 'text', id: 'queue-filter', placeholder: 'queue', value: query.get('queue') || '', 'aria-label': 'queue' });
    const tagInput = withTag ? h('input', { type: 'text', id: 'tag-filter', placeholder: 'tag', value: query.get('tag') || '', 'aria-label': 'tag' }) : null;
    const apply = () => {
      const tag = tagInput ? tagInput.value.trim() : '';
      location.hash = href(route, { ...extra(), queue: input.value.trim(), ...(tag ? { tag } : {}) });
    };
    input.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') apply(); });
    if (tagInput) tagInput.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') apply(); });
    return { input, tagInput, apply };
  }

  function tagList(tags) {
    return h('span', { class: 'tags' }, ...(tags || []).map((t) => h('code', null, t)));
  }

  // STATES are the states a pending job can be filtered by: the API's
  // value and what the page calls it.
  const STATES = [['pending', 'Pending'], ['delayed', 'Delayed'], ['limited', 'Limited'], ['reserved', 'Running (reserved)']];

  function jobsView(status, query) {
    const page = Math.max(parseInt(query.get('page') || '1', 10) || 1, 1);
    const queue = query.get('queue') || '';
    const tagged = status === 'pending' ? query.get('tag') || '' : '';
    const state = status === 'pending' && STATES.some(([v]) => v === query.get('state')) ? query.get('state') : '';
    const route = '/jobs/' + status;
    const stateSelect = status === 'pending' ? h('select', { id: 'state-filter', 'aria-label': 'state' },
      h('option', { value: '' }, 'Any state'), STATES.map(([v, label]) => h('option', { value: v, selected: v === state }, label))) : null;
    const f = queueFilter(query, route, () => (stateSelect && stateSelect.value ? { state: stateSelect.value } : {}), status === 'pending');
    if (stateSelect) stateSelect.addEventListener('change', f.apply);
    const filters = { queue, ...(tagged ? { tag: tagged } : {}), ...(state ? { state } : {}) };
    return {
      title: status === 'pending' ? 'Pending jobs' : 'Completed jobs',
      head: () => [h('div', { class: 'toolbar' }, f.input, f.tagInput, stateSelect, h('button', { type: 'button', id: 'filter', onclick: f.apply }, 'Filter'))],
      load: () => api('GET', 'jobs?' + new URLSearchParams({ status, page, ...(queue ? { queue } : {}), ...(tagged ? { tag: tagged } : {}), ...(state ? { state } : {}) })),
      draw: (d) => {
        const cols = status === 'pending' ? [
          { title: 'ID', cls: 'num', cell: (j) => link('/job/' + j.id, null, String(j.id)) },
          { title: 'Name', cls: 'name', cell: (j) => j.name },
          { title: 'Queue', cls: 'name', cell: (j) => j.queue },
          { title: 'State', cell: (j) => tag(j.state) },
          { title: 'Priority', cls: 'num', cell: (j) => String(j.priority || 0) },
          { title: 'Tags', cls: 'name', cell: (j) => tagList(j.tags) },
          { title: 'Attempts', cls: 'num', cell: (j) => num(j.attempts) },
          { title: 'Available', cell: (j) => ago(j.available_at) },
          { title: 'Created', cell: (j) => when(j.created_at) },
          { title: 'Reserved by', cls: 'name', cell: (j) => j.reserved_by || '' },
          ...(can('operate') ? [{ title: 'Actions', cls: 'act', cell: (j) => cancelButton(j.id, j.state === 'reserved') }] : []),
        ] : [
          { title: 'Job', cls: 'num', cell: (j) => link('/job/' + j.job_id, null, String(j.job_id)) },
          { title: 'Name', cls: 'name', cell: (j) => j.name },
          { title: 'Queue', cls: 'name', cell: (j) => j.queue },
          { title: 'Attempt', cls: 'num', cell: (j) => num(j.attempt) },
          { title: 'Finished', cell: (j) => when(j.finished_at) },
          { title: 'Runtime', cls: 'num', cell: (j) => ms(j.runtime_ms) },
          { title: 'Worker', cls: 'name', cell: (j) => j.worker || '' },
        ];
        return h('div', null,
          table(cols, d.jobs, status === 'pending' ? (queue || tagged || state ? 'No job matches.' : 'No job is waiting or running.')
            : queue ? 'No completed attempt of this queue in the history.' : 'No completed attempt in the history.'),
          pager(d.page, d.has_more, (p) => { location.hash = href(route, { ...filters, page: p }); }));
      },
    };
  }

  // ---- failed jobs ---------------------------------------------------

  function failedView(query) {
    const page = Math.max(parseInt(query.get('page') || '1', 10) || 1, 1);
    const search = query.get('search') || '';
    const queue = query.get('queue') || '';
    const tagged = query.get('tag') || '';
    const searchInput = h('input', { type: 'search', id: 'search', placeholder: 'search name, queue, payload or error', value: search, 'aria-label': 'search' });
    const f = queueFilter(query, '/failed', () => ({ search: searchInput.value }), true);
    searchInput.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') f.apply(); });
    let total = 0;
    const retryAll = can('operate') ? h('button', {
      type: 'button', id: 'retry-all',
      onclick: async () => {
        const scope = (search ? ' matching "' + search + '"' : '') + (queue ? ' in queue ' + queue : '') + (tagged ? ' tagged ' + tagged : '');
        if (!(await confirmAction('Retry all ' + total + ' failed job(s)' + scope + '? Each is dispatched again with fresh attempts.', 'Retry all'))) return;
        act('POST', 'failed/retry?' + new URLSearchParams({ ...(search ? { search } : {}), ...(queue ? { queue } : {}), ...(tagged ? { tag: tagged } : {}) }), undefined,
          (r) => 'Retried ' + r.retried + ' failed job(s).');
      },
    }, 'Retry all') : null;
    return {
      title: 'Failed jobs',
      head: () => [h('div', { class: 'toolbar' }, searchInput, f.input, f.tagInput, h('button', { type: 'button', onclick: f.apply }, 'Search'), retryAll)],
      load: () => api('GET', 'failed?' + new URLSearchParams({ page, ...(search ? { search } : {}), ...(queue ? { queue } : {}), ...(tagged ? { tag: tagged } : {}) })),
      draw: (d) => {
        total = d.total;
        if (retryAll) {
          retryAll.textContent = 'Retry all (' + num(d.total) + ')';
          retryAll.disabled = d.total === 0;
        }
        const cols = [
          { title: 'ID', cls: 'num', cell: (j) => link('/failed/' + j.id, null, String(j.id)) },
          { title: 'Name', cls: 'name', cell: (j) => j.name },
          { title: 'Queue', cls: 'name', cell: (j) => j.queue },
          { title: 'Error', cls: 'err', cell: (j) => firstLine(j.error) },
          { title: 'Tags', cls: 'name', cell: (j) => tagList(j.tags) },
          { title: 'Failed', cell: (j) => when(j.failed_at) },
          { title: 'Attempts', cls: 'num', cell: (j) => j.attempts + '/' + j.max_tries },
        ];
        if (can('operate')) cols.push({ title: 'Actions', cls: 'act', cell: (j) => failedActions(j.id, false) });
        return h('div', null,
          table(cols, d.jobs, search || queue || tagged ? 'No failed job matches.' : 'No failed jobs.'),
          pager(d.page, d.page * d.per_page < d.total, (p) => { location.hash = href('/failed', { search, queue, ...(tagged ? { tag: tagged } : {}), page: p }); }, num(d.total) + ' in all'));
      },
    };
  }

  function failedActions(id, onStory) {
    return h('span', { class: 'row-actions' },
      h('button', {
        type: 'button', class: 'small', 'data-action': 'retry', 'data-id': id,
        onclick: async () => {
          if (!(await confirmAction('Retry failed job ' + id + '? It is dispatched again with fresh attempts.', 'Retry'))) return;
          const r = await act('POST', 'failed/' + id + '/retry', undefined, (x) => 'Retried failed job ' + x.failed_id + ' as job ' + x.job_id + '.');
          if (r && onStory) location.hash = href('/job/' + r.job_id);
        },
      }, 'Retry'),
      h('button', {
        type: 'button', class: 'small danger', 'data-action': 'forget', 'data-id': id,
        onclick: async () => {
          if (!(await confirmAction('Forget failed job ' + id + '? It is deleted for good.', 'Forget'))) return;
          const r = await act('DELETE', 'failed/' + id, undefined, (x) => 'Forgot failed job ' + x.forgotten + '.');
          if (r && onStory) location.hash = href('/failed');
        },
      }, 'Forget'));
  }

  // cancelButton cancels a queued job: a waiting one at once, a running
  // one by asking its worker to stop it.
  function cancelButton(id, running) {
    return h('button', {
      type: 'button', class: 'small danger', 'data-action': 'cancel', 'data-id': id,
      onclick: async () => {
        const what = running ? 'Its worker is asked to stop it; it is not retried.' : 'It is deleted and never runs.';
        if (!(await confirmAction('Cancel job ' + id + '? ' + what, 'Cancel job'))) return;
        await act('POST', 'jobs/' + id + '/cancel', undefined, (x) => x.outcome === 'cancelled'
          ? 'Cancelled job ' + x.id + '.' : 'Asked the worker of job ' + x.id + ' to stop it.');
      },
    }, 'Cancel');
  }

  // ---- one job's story -----------------------------------------------

  function storyView(path, failedID) {
    return {
      title: failedID ? 'Failed job ' + failedID : 'Job ' + path.split('/')[1],
      load: () => api('GET', path),
      draw: (s) => {
        const facts = [];
        const fact = (k, ...v) => facts.push(h('dt', null, k), h('dd', null, ...v));
        fact('Job', String(s.id));
        fact('Name', s.name);
        fact('Queue', s.queue);
        fact('State', tag(s.state));
        fact('Tries', s.tries + (s.max_tries ? ' of ' + s.max_tries : ''));
        if (s.created_at) fact('Created', when(s.created_at));
        if (s.available_at) fact('Available', when(s.available_at));
        if (s.reserved) fact('Reserved by', s.reserved.worker + (s.reserved.master ? ' on ' + s.reserved.master : '') + (s.reserved.since ? ' since ' + when(s.reserved.since) : ''));
        if (s.failed) fact('Failed', 'as failed job ' + s.failed.id + ' at ' + when(s.failed.failed_at) + ' after ' + s.failed.attempts + ' of ' + s.failed.max_tries + ' attempts');
        if (s.cancel) fact('Cancelled', s.cancel.requested ? 'requested by ' + s.cancel.by + ' at ' + when(s.cancel.at) + '; its worker is stopping it'
          : 'at ' + when(s.cancel.at) + ': ' + s.cancel.reason);
        if (s.retry_of) fact('Retry of', link('/job/' + s.retry_of, null, 'job ' + s.retry_of));
        if (s.retries.length) {
          fact('Retried as', s.retries.map((r, i) => [i ? ', ' : '', r.failed_id ? link('/failed/' + r.failed_id, null, 'job ' + r.job_id) : link('/job/' + r.job_id, null, 'job ' + r.job_id), ' (' + r.state + ')']));
        }
        fact('Read at', when(s.at));
        const queued = ['pending', 'delayed', 'limited', 'reserved'].includes(s.state) && !(s.cancel && s.cancel.requested);
        const actions = !can('operate') ? null : s.failed ? failedActions(s.failed.id, true)
          : queued ? h('span', { class: 'row-actions' }, cancelButton(s.id, s.state === 'reserved')) : null;
        const payload = s.payload === undefined ? h('p', { class: 'muted' }, 'Not kept: the history keeps no payloads once a job leaves the queue.')
          : h('pre', { id: 'payload' }, JSON.stringify(s.payload, null, 2));
        const error = s.failed ? s.failed.error : s.last_error;
        return h('div', null,
          h('section', { class: 'panel' }, h('dl', { class: 'facts', id: 'facts' }, facts), actions ? h('div', { class: 'actions' }, actions) : null),
          h('h2', null, 'Payload'), payload,
          error ? [h('h2', null, s.failed ? 'Error' : 'Last error'), h('pre', { id: 'error' }, error)] : null,
          h('h2', null, 'Attempts'),
          s.attempts.length ? h('section', { class: 'panel', id: 'attempts' }, s.attempts.map((a) => h('div', { class: 'attempt' },
            h('div', null, h('strong', null, 'Attempt ' + a.attempt), tag(a.status), ' ', h('span', { class: 'muted' },
              when(a.started_at) + ' → ' + when(a.finished_at) + ' · ' + ms(a.runtime_ms) +
              (a.worker ? ' · ' + a.worker : '') + (a.master ? ' on ' + a.master : ''))),
            a.error ? h('pre', null, a.error) : null)))
            : h('p', { class: 'muted' }, 'No attempt recorded yet.'));
      },
    };
  }

  // ---- metrics -------------------------------------------------------

  function metricsView(query) {
    const period = ['hour', 'day', 'week'].includes(query.get('period')) ? query.get('period') : 'hour';
    const subject = query.get('queue') !== null ? { queue: query.get('queue') } : query.get('job') !== null ? { job: query.get('job') } : {};
    const periodSelect = h('select', { id: 'period', 'aria-label': 'period' },
      ['hour', 'day', 'week'].map((p) => h('option', { value: p, selected: p === period }, 'Past ' + p)));
    const subjectSelect = h('select', { id: 'subject', 'aria-label': 'queue or job' }, h('option', { value: '' }, 'Every queue'));
    const go = () => {
      const [kind, ...rest] = subjectSelect.value.split(':');
      location.hash = href('/metrics', { period: periodSelect.value, ...(kind ? { [kind]: rest.join(':') } : {}) });
    };
    periodSelect.addEventListener('change', go);
    subjectSelect.addEventListener('change', go);
    return {
      title: 'Metrics',
      head: () => [h('div', { class: 'toolbar' }, periodSelect, subjectSelect)],
      load: () => api('GET', 'metrics?' + new URLSearchParams({ period, ...subject })),
      draw: (d) => {
        const chosen = d.kind ? d.kind + ':' + d.subject : '';
        subjectSelect.replaceChildren(h('option', { value: '' }, 'Every queue'),
          d.queues.length ? h('optgroup', { label: 'Queues' }, d.queues.map((q) => h('option', { value: 'queue:' + q, selected: chosen === 'queue:' + q }, q))) : null,
          d.jobs.length ? h('optgroup', { label: 'Jobs' }, d.jobs.map((j) => h('option', { value: 'job:' + j, selected: chosen === 'job:' + j }, j))) : null);
        if (d.kind && !d.queues.concat(d.jobs).includes(d.subject)) {
          subjectSelect.append(h('option', { value: chosen, selected: true }, d.subject));
        }
        const groups = new Map();
        for (const r of d.rows) {
          if (!d.kind && r.kind !== 'queue') continue;
          const k = r.kind + ':' + r.subject;
          if (!groups.has(k)) groups.set(k, { kind: r.kind, subject: r.subject, rows: [] });
          groups.get(k).rows.push(r);
        }
        if (!groups.size) {
          return h('p', { class: 'empty panel' }, 'No snapshot in this period yet: a master writes one per queue and job name each minute.');
        }
        const to = new Date(d.at).getTime();
        const from = to - d.span_secs * 1000;
        const step = d.bucket_secs * 1000;
        return h('div', { class: 'charts', id: 'charts' }, [...groups.values()].map((g) => {
          const byTime = new Map(g.rows.map((r) => [new Date(r.taken_at).getTime(), r]));
          const start = Math.floor(from / step) * step;
          // A bucket without a snapshot (observed false) is unknown, not 0:
          // the line breaks there over a shaded gap.
          const through = [], holes = [];
          for (let t = start; t <= to; t += step) {
            const r = byTime.get(t);
            if (r && r.observed !== false) through.push([t, r.jobs_per_minute]);
            else if (r) holes.push(t);
          }
          const ran = g.rows.filter((r) => r.jobs > 0).map((r) => [new Date(r.taken_at).getTime(), r]);
          const jobs = g.rows.reduce((n, r) => n + r.jobs, 0);
          const failed = g.rows.reduce((n, r) => n + r.failed, 0);
          return h('section', { class: 'panel chart', 'data-subject': g.subject },
            h('h3', null, (g.kind === 'queue' ? 'Queue ' : 'Job ') + g.subject),
            h('div', { class: 'muted' }, num(jobs) + ' attempts, ' + num(failed) + ' failed'),
            h('div', { class: 'legend' }, h('span', null, h('span', { class: 'swatch sw1' }), 'jobs per minute')),
            lineChart([{ cls: 1, points: through, area: true, gap: step, holes }], from, to, period, (v) => round(v, v < 10 ? 1 : 0)),
            h('div', { class: 'legend' }, h('span', null, h('span', { class: 'swatch sw1' }), 'runtime p50'), h('span', null, h('span', { class: 'swatch sw2' }), 'runtime p95')),
            // Runtimes exist only for buckets that ran jobs: a line is broken
            // across the buckets between, rather than drawn through them.
            lineChart([
              { cls: 1, gap: step, points: ran.map(([t, r]) => [t, r.runtime_p50_ms]) },
              { cls: 2, gap: step, points: ran.map(([t, r]) => [t, r.runtime_p95_ms]) },
            ], from, to, period, ms));
        }));
      },
    };
  }

  // lineChart draws series of [time ms, value] points as SVG lines over
  // [from, to], with a zero-based y axis labelled by fmt. A series' holes
  // are the times of buckets with no data: each run of them is a shaded
  // band (class gap) between the points around it.
  function lineChart(series, from, to, period, fmt) {
    const W = 420, H = 150, L = 50, R = 8, T = 8, B = 20;
    const max = niceMax(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1]))));
    const x = (t) => L + ((t - from) / (to - from)) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    const kids = [];
    for (const f of [0, 0.5, 1]) {
      kids.push(svg('line', { class: f ? 'grid' : 'axis', x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }));
      kids.push(svg('text', { x: L - 4, y: y(max * f) + 3, 'text-anchor': 'end' }, fmt(max * f)));
    }
    const label = (t) => {
      const d = new Date(t);
      return period === 'hour' ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
        : d.toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
    };
    kids.push(svg('text', { x: L, y: H - 5, 'text-anchor': 'start' }, label(from)));
    kids.push(svg('text', { x: W - R, y: H - 5, 'text-anchor': 'end' }, label(to)));
    for (const s of series) {
      const holes = (s.holes || []).slice().sort((a, b) => a - b);
      for (let i = 0; i < holes.length;) {
        let j = i;
        while (j + 1 < holes.length && holes[j + 1] - holes[j] <= 1.5 * s.gap) j++;
        const x1 = x(Math.max(from, holes[i] - s.gap)), x2 = x(Math.min(to, holes[j] + s.gap));
        if (x2 > x1) {
          kids.push(svg('rect', { class: 'gap', x: x1.toFixed(1), y: T, width: (x2 - x1).toFixed(1), height: H - T - B },
            svg('title', null, 'no snapshot')));
        }
        i = j + 1;
      }
      const pts = s.points.filter((p) => p[0] >= from && p[0] <= to).sort((a, b) => a[0] - b[0]);
      if (!pts.length) continue;
      // A series with a gap starts a new stretch of line after a jump of
      // more than one bucket; a point alone in its stretch gets a dot.
      const broken = (i) => i === 0 || (s.gap && pts[i][0] - pts[i - 1][0] > 1.5 * s.gap);
      const alone = (i) => broken(i) && (i === pts.length - 1 || broken(i + 1));
      const d = pts.map((p, i) => (broken(i) ? 'M' : 'L') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
      if (s.area) {
        // Each stretch of line closes its own area down to 0.
        let area = '';
        pts.forEach((p, i) => {
          const px = x(p[0]).toFixed(1), py = y(p[1]).toFixed(1);
          area += (broken(i) ? (i ? ' ' : '') + 'M' + px + ' ' + y(0) + ' L' : ' L') + px + ' ' + py;
          if (i === pts.length - 1 || broken(i + 1)) area += ' L' + px + ' ' + y(0) + ' Z';
        });
        kids.push(svg('path', { class: 'a' + s.cls, d: area }));
      }
      kids.push(svg('path', { class: 'l' + s.cls, d }));
      pts.forEach((p, i) => {
        if (alone(i)) kids.push(svg('circle', { class: 'l' + s.cls, cx: x(p[0]), cy: y(p[1]), r: 2.5 }));
      });
    }
    return svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'chart' }, kids);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // ---- periodic schedules --------------------------------------------

  // zoned shows a time as the API gives it, in its schedule's time zone
  // (2025-03-30 03:00:00 +02:00), with how far it is from now.
  function zoned(iso, at) {
    if (!iso) return '—';
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$/.exec(iso);
    const shown = m ? m[1] + ' ' + m[2] + ' ' + (m[3] === 'Z' ? 'UTC' : m[3]) : String(iso);
    return h('span', { title: when(iso) }, shown, h('span', { class: 'muted' }, ' (' + ago(iso, at) + ')'));
  }

  function periodicView() {
    return {
      title: 'Periodic jobs',
      load: () => api('GET', 'periodic'),
      draw: (d) => {
        const cols = [
          // One element per cell: on a phone a cell is a grid of its label and one value.
          { title: 'Name', cls: 'name', cell: (p) => h('span', null, p.name, p.configured ? null : tag('not configured', 'unworked')) },
          { title: 'Source', cell: (p) => (p.source ? h('span', null, tag(p.source, 'source')) : '—') },
          { title: 'Cron', cls: 'name', cell: (p) => (p.cron ? h('code', null, p.cron) : '—') },
          { title: 'Time zone', cell: (p) => p.timezone || '—' },
          { title: 'Job', cls: 'name', cell: (p) => p.job || '—' },
          { title: 'Queue', cls: 'name', cell: (p) => (p.queue ? link('/jobs/pending', { queue: p.queue }, p.queue) : '—') },
          { title: 'Catch-up', cell: (p) => (p.catch_up ? p.catch_up + (p.catch_up_max ? ' (max ' + p.catch_up_max + ')' : '') : '—') },
          { title: 'Next tick', cell: (p) => zoned(p.next_tick, d.at) },
          { title: 'Last tick', cell: (p) => zoned(p.last_tick, d.at) },
          { title: 'Last job', cls: 'num', cell: (p) => (p.last_job_id ? link('/job/' + p.last_job_id, null, String(p.last_job_id)) : '—') },
          { title: 'Due since', cell: (p) => (p.due_since ? h('span', { class: 'tag paused', title: 'a tick came due that no master has dispatched: no master runs this schedule' }, zoned(p.due_since, d.at)) : '—') },
        ];
        const t = table(cols, d.schedules,
          'No periodic schedule: add [fleet.periodic.NAME] tables to the configuration, or register them in the code with jobs.Periodic.');
        t.id = 'schedules';
        return h('div', null, h('p', { class: 'muted' },
          'Each schedule of this app, from its configuration (source config) or its code (source code), then those only the database knows. ' +
          'Times are in each schedule\'s time zone; every master dispatches each tick once across the fleet.'), t);
      },
    };
  }

  // ---- start ---------------------------------------------------------

  // boot signs in with the tab's stored token; while the API is
  // unreachable it says so and tries again.
  function boot() {
    signIn().catch((e) => {
      if (e instanceof ApiError && e.status === 401) return;
      failure(e);
      if (e instanceof ApiError && e.status === 0) timer = setTimeout(boot, REFRESH);
    });
  }

  if (token) boot();
  else showSignIn('');
})();
