// Coordinator console: a hash-routed page over the monitoring API, with the
// write controls of writes.js where the session may use them.
//
//   #/                         every group and stream
//   #/group/<prefix>/<group>   one group, live (refreshed every 2 s)
//   #/group/<p>/<g>/at/<id>    the same group as it was after event <id> (replay)
//
// Sign-in is the reference console's: POST /coord/v1/auth/login, then GET
// /coord/v1/monitoring/session with the bearer token for the user's roles and
// prefixes. The token and its expiry live in sessionStorage (gone when the tab
// closes); when it expires the console goes back to sign-in and says what it
// did not send. Everything the server sends is put on the page as text (never
// as HTML): prefixes, member ids and reasons are operator input.
'use strict';

(() => {
  const API = '/coord/v1';
  const TOKEN_KEY = 'rsc.console.token';
  const EXPIRES_KEY = 'rsc.console.expires'; // ms since the epoch, this browser's clock
  const THEME_KEY = 'rsc.console.theme';
  const REFRESH_MS = 2000;
  const SESSION_CHECK_MS = 60000;
  const EXPIRY_WARNING_MS = 5 * 60000;
  const HISTORY_PAGE = 500;

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  // ---------------------------------------------------------------- DOM helpers

  // h builds an element: h('td', {class: 'num', text: '3'}, child, [children]).
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c == null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  const lower = (s) => String(s || '').toLowerCase().replace(/[^a-z0-9]+/g, '-');

  function fmtTime(iso) {
    if (!iso || iso.startsWith('0001-')) return '—';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function fmtClock(d) {
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  const time = (iso) => h('time', { datetime: iso, title: iso, text: fmtTime(iso) });

  // ranges renders [0,1,2,5] as "0–2, 5".
  function ranges(idx) {
    const s = [...new Set(idx)].sort((a, b) => a - b);
    const out = [];
    for (let i = 0; i < s.length; i++) {
      let j = i;
      while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
      out.push(j > i ? `${s[i]}–${s[j]}` : String(s[i]));
      i = j;
    }
    return out.join(', ');
  }

  const shardIdx = (refs) => (refs || []).map((r) => r.shardIndex);

  function badge(text, kind) {
    return h('span', { class: `badge ${kind || ''} st-${lower(text)}`, text: text || '—' });
  }

  function num(v, { unknown = '?', unknownTitle } = {}) {
    if (v == null) return h('span', { class: 'muted', title: unknownTitle, text: unknown });
    return h('span', { class: v > 0 ? 'nonzero' : '', text: String(v) });
  }

  // ---------------------------------------------------------------- errors

  const errors = new Map();

  function setError(key, msg) {
    if (msg) errors.set(key, msg);
    else errors.delete(key);
    const el = $('error');
    el.textContent = [...errors.values()].join(' ');
    el.hidden = errors.size === 0;
  }

  function clearErrors() {
    errors.clear();
    setError('', '');
  }

  // ---------------------------------------------------------------- API

  class SignedOut extends Error {}

  async function api(path) {
    const t = token();
    if (!t) throw new SignedOut('signed out');
    const res = await fetch(path, {
      mode: 'same-origin',
      credentials: 'omit',
      headers: { Authorization: `Bearer ${t}`, Accept: 'application/json' },
      cache: 'no-store',
    });
    if (res.status === 401) {
      if (sessionStorage.getItem(TOKEN_KEY) === t) sessionEnded(''); // else an answer for a session already gone
      throw new SignedOut('signed out');
    }
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      // Not JSON (a proxy's error page): the status says enough.
    }
    if (!res.ok) {
      const msg = res.status === 403 ? 'this account may not read it (its role or its stream prefixes do not allow it)' : (body && body.message) || `HTTP ${res.status}`;
      const e = new Error(msg);
      e.status = res.status;
      throw e;
    }
    return body;
  }

  // guarded runs a refresh; a failure is shown under key and retried by the
  // caller's poller. A 404 goes to onMissing instead, when given: a group that
  // does not exist is a state to show, not an error.
  async function guarded(key, what, fn, onMissing) {
    try {
      const v = await fn();
      setError(key, '');
      return v;
    } catch (e) {
      if (e instanceof SignedOut) return null;
      if (e.status === 404 && onMissing) {
        setError(key, '');
        onMissing(e);
        return null;
      }
      setError(key, `${what} failed: ${e.message}. Retrying every ${REFRESH_MS / 1000} s.`);
      return null;
    }
  }

  const groupAPI = (p, g) => `${API}/monitoring/streams/${enc(p)}/groups/${enc(g)}`;
  const groupHash = (p, g, at) => `#/group/${enc(p)}/${enc(g)}${at ? `/at/${enc(at)}` : ''}`;

  // Poller calls fn, waits ms, calls it again; a restart never leaves two loops running.
  class Poller {
    constructor(fn, ms) {
      this.fn = fn;
      this.ms = ms;
      this.gen = 0;
      this.timer = null;
    }

    // start calls fn at once, or after one period when later is true.
    start(later) {
      this.stop();
      const gen = this.gen;
      const tick = async () => {
        if (gen !== this.gen) return;
        if (!document.hidden) {
          try {
            await this.fn();
          } catch (e) {
            console.error(e);
          }
        }
        if (gen === this.gen) this.timer = setTimeout(tick, this.ms);
      };
      if (later) this.timer = setTimeout(tick, this.ms);
      else tick();
    }

    stop() {
      this.gen++;
      clearTimeout(this.timer);
    }
  }

  // ---------------------------------------------------------------- session

  let page = null; // the page on screen: GroupsPage or GroupPage
  // session is what GET /monitoring/session said of the token: { username,
  // roles, prefixes } (prefixes null: every prefix). null when signed out.
  let session = null;
  let expiryTimer = null;
  let warningTimer = null;
  // expiredInFlight: the token expired while a write was in flight; its
  // answer decides what the sign-in screen says.
  let expiredInFlight = false;
  const sessionPoll = new Poller(() => checkSession(), SESSION_CHECK_MS);

  const writes = window.rscConsoleWrites({
    h, API,
    session: () => session,
    token: () => token(),
    sessionEnded: (what) => sessionEnded(what),
    settled: (outcome) => {
      if (expiredInFlight) signOut(`${expiredText()} ${outcome}`);
    },
    notice: (kind, nodes) => notice(kind, nodes),
  });

  // notice shows the answer to a write whose control left the page (the
  // operator moved on while it was in flight) until it is dismissed.
  function notice(kind, nodes) {
    const el = $('notice');
    el.className = `notice write-status ${kind}`;
    el.replaceChildren(...nodes, ' ', h('button', { type: 'button', class: 'link', text: 'Dismiss', onclick: () => {
      el.hidden = true;
    } }));
    el.hidden = false;
  }

  const expiresAt = () => Number(sessionStorage.getItem(EXPIRES_KEY)) || 0;

  function expiredText() {
    const at = expiresAt();
    return `Your session expired${at ? ` at ${fmtClock(new Date(at))}` : ''}.`;
  }

  // token is the bearer token while it has not expired; an expired one signs
  // out (after the write in flight, if any, has its answer).
  function token() {
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (!t || !session) return null;
    if (Date.now() < expiresAt()) return t;
    expire();
    return null;
  }

  function expire() {
    if (writes.busy()) {
      expiredInFlight = true;
      return;
    }
    signOut(`${expiredText()} Sign in again.`);
  }

  // sessionEnded: the coordinator answered 401 to the token (the user was
  // removed, its roles changed, or the token expired early).
  function sessionEnded(what) {
    signOut(`Your session ended: the coordinator no longer accepts its token. ${what ? `${what} ` : ''}Sign in again.`);
  }

  function showLogin(msg) {
    $('login').hidden = false;
    $('view').hidden = true;
    $('session').hidden = true;
    const err = $('login-error');
    err.textContent = msg || '';
    err.hidden = !msg;
    setCrumbs([]);
    $('login-username').focus();
  }

  // signOut forgets the token and shows sign-in with msg and whatever was
  // dropped (a confirm dialog not sent). The hash stays: signing in again
  // returns to the same page.
  function signOut(msg) {
    const lost = writes.abandon();
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(EXPIRES_KEY);
    session = null;
    expiredInFlight = false;
    $('notice').hidden = true;
    clearTimeout(expiryTimer);
    clearTimeout(warningTimer);
    sessionPoll.stop();
    if (page) page.stop();
    page = null;
    $('view').replaceChildren();
    clearErrors();
    showLogin([msg, lost].filter(Boolean).join(' '));
  }

  // expiryOf is when a login answer's token expires on this browser's clock:
  // the earlier of expiresAt and the request time plus expiresInSeconds, so
  // that a clock ahead of or behind the server's never keeps a dead token.
  function expiryOf(body, sentAt) {
    const at = [];
    if (Number.isFinite(body.expiresInSeconds)) at.push(sentAt + body.expiresInSeconds * 1000);
    const parsed = Date.parse(body.expiresAt);
    if (Number.isFinite(parsed)) at.push(parsed);
    return at.length ? Math.min(...at) : 0;
  }

  // readSession asks GET /monitoring/session who tok belongs to: a session,
  // or the HTTP status that refused it.
  async function readSession(tok) {
    const res = await fetch(`${API}/monitoring/session`, {
      mode: 'same-origin', credentials: 'omit', cache: 'no-store',
      headers: { Authorization: `Bearer ${tok}`, Accept: 'application/json' },
    });
    if (!res.ok) return { status: res.status };
    const b = await res.json();
    if (!b || b.authenticated !== true || typeof b.username !== 'string') return { status: 401 };
    const strings = (v) => (Array.isArray(v) ? v.filter((x) => typeof x === 'string') : []);
    return {
      status: 200,
      session: {
        username: b.username,
        roles: strings(b.roles),
        // Absent (a coordinator without scoped principals) or null: every prefix.
        prefixes: b.prefixes === undefined || b.prefixes === null ? null : strings(b.prefixes),
      },
    };
  }

  const NO_CONSOLE = 'This account has no console access: the console needs the READ role (or WRITE, ADMIN, MONITOR).';

  async function login(ev) {
    ev.preventDefault();
    const user = $('login-username').value.trim();
    const pass = $('login-password').value;
    const button = $('login-submit');
    const fail = (msg) => {
      $('login-password').value = '';
      showLogin(msg);
    };
    button.disabled = true;
    try {
      const sentAt = Date.now();
      const res = await fetch(`${API}/auth/login`, {
        method: 'POST',
        mode: 'same-origin',
        credentials: 'omit',
        cache: 'no-store',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ username: user, password: pass }),
      });
      if (res.status === 401) return fail('Wrong username or password.');
      if (res.status === 403) return fail(NO_CONSOLE);
      if (res.status === 429) {
        const retry = res.headers.get('Retry-After');
        return fail(`Too many failed sign-ins${retry ? `: try again in ${retry} s` : ''}.`);
      }
      if (!res.ok) return fail(`Sign-in failed (HTTP ${res.status}).`);
      const body = await res.json();
      const exp = expiryOf(body || {}, sentAt);
      if (!body || typeof body.accessToken !== 'string' || body.accessToken === '' || !(exp > Date.now())) {
        return fail('The coordinator answered without a usable token (missing, or already expired: check the clocks).');
      }
      const who = await readSession(body.accessToken);
      if (who.status === 403) return fail(NO_CONSOLE);
      if (who.status !== 200) return fail(`The coordinator did not accept the token it issued (HTTP ${who.status}).`);
      sessionStorage.setItem(TOKEN_KEY, body.accessToken);
      sessionStorage.setItem(EXPIRES_KEY, String(exp));
      $('login-password').value = '';
      begin(who.session);
    } catch (e) {
      fail(`Cannot reach the coordinator: ${e.message}`);
    } finally {
      button.disabled = false;
    }
    return undefined;
  }

  // begin starts a session: its timers, its periodic check, the page.
  function begin(s) {
    session = s;
    armTimers();
    sessionPoll.start(true);
    showSession();
    route();
  }

  // resume picks up the token of this tab after a reload.
  async function resume() {
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (!t) return showLogin('');
    if (!(Date.now() < expiresAt())) return signOut(`${expiredText()} Sign in again.`);
    try {
      const who = await readSession(t);
      if (who.status === 401) return sessionEnded('');
      if (who.status === 403) return signOut(NO_CONSOLE);
      if (who.status !== 200) throw new Error(`HTTP ${who.status}`);
      begin(who.session);
    } catch (e) {
      setError('session', `Checking the session failed: ${e.message}. Retrying every ${REFRESH_MS / 1000} s.`);
      setTimeout(resume, REFRESH_MS);
    }
    return undefined;
  }

  // checkSession re-reads the session: a removed user or a changed role or
  // scope shows at once, and the page is rebuilt with what it now allows.
  async function checkSession() {
    const t = token();
    if (!t) return;
    let who;
    try {
      who = await readSession(t);
    } catch (_) {
      return; // unreachable: the page's own refresh says so; the next check retries
    }
    if (token() !== t) return; // signed out meanwhile
    if (who.status === 401) return sessionEnded('');
    if (who.status === 403) return signOut(NO_CONSOLE);
    if (who.status !== 200) return;
    if (JSON.stringify(who.session) === JSON.stringify(session)) return;
    // Not under an open dialog: the next check applies the change (the
    // coordinator checks every request anyway).
    if (writes.isOpen()) return;
    session = who.session;
    showSession();
    if (page) page.stop();
    page = null;
    route();
  }

  function armTimers() {
    clearTimeout(expiryTimer);
    clearTimeout(warningTimer);
    const left = expiresAt() - Date.now();
    // setTimeout holds at most 2^31-1 ms (24.8 days): a longer wait re-arms.
    expiryTimer = setTimeout(() => (Date.now() < expiresAt() ? armTimers() : expire()), Math.min(Math.max(left, 0), 2 ** 31 - 1));
    const warn = left - EXPIRY_WARNING_MS;
    if (warn < 2 ** 31 - 1) warningTimer = setTimeout(() => showSession(), Math.max(warn, 0));
  }

  // showSession fills the top bar: who, with which roles and prefixes, until when.
  function showSession() {
    if (!session) return;
    $('session').hidden = false;
    $('session-user').textContent = session.username;
    const roles = session.roles.join(', ') || 'no role';
    const scope = session.prefixes ? ` · prefixes ${session.prefixes.join(', ') || 'none'}` : '';
    $('session-roles').textContent = `${roles}${scope}${writes.mayWriteSomewhere() ? '' : ' · read-only'}`;
    const at = expiresAt();
    const exp = $('session-expiry');
    const soon = at - Date.now() <= EXPIRY_WARNING_MS;
    exp.textContent = soon ? `session ends at ${fmtClock(new Date(at))}` : `until ${fmtTime(new Date(at).toISOString()).slice(0, 16)}`;
    exp.title = `The token expires at ${new Date(at).toString()}; then the console asks you to sign in again.`;
    exp.classList.toggle('soon', soon);
  }

  function setCrumbs(items) {
    const parts = [];
    items.forEach((it, i) => {
      if (i > 0) parts.push(h('span', { class: 'sep', text: '›' }));
      parts.push(it.href ? h('a', { href: it.href, text: it.text }) : h('span', { text: it.text }));
    });
    $('crumbs').replaceChildren(...parts);
  }

  // ---------------------------------------------------------------- routing

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, '');
    let parts = [];
    try {
      parts = raw === '' ? [] : raw.split('/').map(decodeURIComponent);
    } catch (_) {
      return { name: 'groups' };
    }
    if (parts[0] === 'group' && parts.length >= 3) {
      return { name: 'group', prefix: parts[1], group: parts[2], at: parts[3] === 'at' && parts[4] ? parts[4] : null };
    }
    return { name: 'groups' };
  }

  function route() {
    if (!session || !sessionStorage.getItem(TOKEN_KEY)) {
      if (!session && sessionStorage.getItem(TOKEN_KEY)) return; // resume() is checking it
      showLogin('');
      return;
    }
    $('login').hidden = true;
    $('view').hidden = false;
    showSession();
    const r = parseHash();
    if (page && page.accepts(r)) {
      page.update(r);
      return;
    }
    if (page) page.stop();
    writes.abandon();
    clearErrors();
    page = r.name === 'group' ? new GroupPage(r) : new GroupsPage();
  }

  // ---------------------------------------------------------------- groups overview

  class GroupsPage {
    constructor() {
      setCrumbs([{ text: 'Groups' }]);
      this.last = '';
      this.stamp = h('span', { class: 'stamp' });
      this.body = h('div', { class: 'card flush' }, h('p', { class: 'empty', text: 'Loading…' }));
      this.streams = h('div', { class: 'card flush' }, h('p', { class: 'empty', text: 'Loading…' }));
      // One scale control per stream prefix, kept across refreshes so that a
      // target being typed survives them.
      this.scales = new Map();
      const refresh = () => this.poll.start();
      $('view').replaceChildren(h('div', { class: 'page' },
        h('div', { class: 'page-head' }, h('h1', { text: 'Groups' }), this.stamp),
        writes.mayWriteSomewhere() ? writes.createPanel(refresh) : null,
        this.body,
        h('h2', { text: 'Streams' }),
        this.streams));
      this.poll = new Poller(() => this.refresh(), REFRESH_MS);
      this.poll.start();
    }

    accepts(r) {
      return r.name === 'groups';
    }

    update() {}

    stop() {
      this.poll.stop();
    }

    async refresh() {
      const data = await guarded('groups', 'Loading groups', async () => {
        // The lag columns come from the Grafana group rows (Redis's view, as
        // the coordinator's cache last read it); without them the rest shows.
        const [groups, streams, lagRows] = await Promise.all([api(`${API}/monitoring/groups`), api(`${API}/monitoring/streams`),
          api(`${API}/monitoring/grafana/groups`).catch((e) => {
            if (e instanceof SignedOut) throw e;
            return null;
          })]);
        const lag = new Map((lagRows || []).map((r) => [`${r.streamPrefix}/${r.consumerGroup}`, r]));
        return { groups: groups.groups || [], streams: streams.streams || [], lag: Object.fromEntries(lag) };
      });
      if (!data || page !== this) return;
      liveStamp(this.stamp);
      const key = JSON.stringify(data);
      if (key === this.last) return;
      this.last = key;
      this.body.replaceChildren(groupsTable(data.groups, data.lag));
      this.streams.replaceChildren(this.streamsTable(data.streams, data.groups));
    }

    // scaleFor is the stream's scale control, or null where the session may not write.
    scaleFor(prefix) {
      if (!writes.mayWrite(prefix)) return null;
      if (!this.scales.has(prefix)) this.scales.set(prefix, writes.streamScale(prefix, () => this.poll.start()));
      return this.scales.get(prefix);
    }

    // streamsTable: one row per stream (GET /monitoring/streams: a stream
    // with metadata is listed before any group joins it), with its groups
    // and the stream-level scale where allowed.
    streamsTable(streams, groups) {
      const byPrefix = new Map();
      for (const g of groups) {
        if (!byPrefix.has(g.streamPrefix)) byPrefix.set(g.streamPrefix, []);
        byPrefix.get(g.streamPrefix).push(g);
      }
      if (streams.length === 0) return h('p', { class: 'empty', text: 'No streams yet.' });
      const canScale = streams.some((st) => writes.mayWrite(st.streamPrefix));
      const rows = [...streams].sort((a, b) => cmp(a.streamPrefix, b.streamPrefix)).map((st) => {
        const prefix = st.streamPrefix;
        const gs = (byPrefix.get(prefix) || []).sort((a, b) => cmp(a.consumerGroup, b.consumerGroup));
        const counts = st.shardCount == null
          ? [...new Set(gs.map((g) => g.shardCount))].sort((a, b) => a - b)
          : [st.shardCount];
        const active = gs.filter((g) => g.activeMigration);
        const ctl = this.scaleFor(prefix);
        if (ctl) {
          ctl.set({
            from: counts.length === 1 ? counts[0] : null,
            fromText: counts.join(' and '),
            blocked: active.length
              ? `${active.map((g) => g.consumerGroup).join(', ')} ${active.length === 1 ? 'has' : 'have'} an active resharding: the stream scales once ${active.length === 1 ? 'it completes' : 'they complete'} or ${active.length === 1 ? 'is' : 'are'} rolled back.`
              : null,
          });
        }
        const groupCell = gs.length
          ? gs.map((g, i) => [i ? ', ' : '', h('a', { href: groupHash(prefix, g.consumerGroup), text: g.consumerGroup })])
          : h('span', { class: 'muted', text: 'none yet (groups register on their first heartbeat)' });
        return h('tr', { 'data-stream': prefix },
          h('td', { class: 'mono', text: prefix }),
          h('td', { class: 'mono small' }, groupCell),
          h('td', { class: 'num', 'data-field': 'shardCount' }, counts.length === 1 ? String(counts[0]) : [counts.join(' · '), h('span', { class: 'muted small', text: ' (groups differ)' })]),
          h('td', { class: 'num', 'data-field': 'metadataVersion', text: st.metadataVersion == null ? '–' : String(st.metadataVersion) }),
          h('td', { class: 'small', 'data-field': 'origin', text: st.hasMetadata ? (st.origin || '') : 'no metadata' }),
          canScale ? h('td', null, ctl ? ctl.el : h('span', { class: 'muted small', text: 'read-only' })) : null);
      });
      return h('table', { class: 'table', id: 'streams-table' },
        h('thead', null, h('tr', null,
          h('th', { text: 'Stream prefix' }), h('th', { text: 'Consumer groups' }), h('th', { class: 'num', text: 'Shards' }),
          h('th', { class: 'num', title: 'the stream\'s metadata version: one more per layout change', text: 'Version' }),
          h('th', { text: 'Origin' }),
          canScale ? h('th', { text: 'Scale the stream (every group of it)' }) : null)),
        h('tbody', null, rows));
    }
  }

  function liveStamp(el) {
    el.replaceChildren(h('span', { class: 'dot' }), `Live · updated ${fmtClock(new Date())}`);
  }

  function groupsTable(groups, lag) {
    if (groups.length === 0) {
      return h('p', { class: 'empty', text: 'No groups yet.' });
    }
    const sorted = [...groups].sort((a, b) => cmp(a.streamPrefix, b.streamPrefix) || cmp(a.consumerGroup, b.consumerGroup));
    return h('table', { class: 'table', id: 'groups-table' },
      h('thead', null, h('tr', null,
        h('th', { text: 'Stream prefix' }), h('th', { text: 'Consumer group' }), h('th', { text: 'State' }),
        h('th', { class: 'num', text: 'Shards' }),
        h('th', { class: 'num', title: 'group epoch · assignment epoch · metadata version', text: 'Epochs (group · assign · meta)' }),
        h('th', { class: 'num', text: 'Live members' }), h('th', { text: 'Resharding' }),
        h('th', { title: 'lag status · age of the oldest entry not yet delivered', text: 'Lag' }))),
      h('tbody', null, sorted.map((g) => groupRow(g, lag[`${g.streamPrefix}/${g.consumerGroup}`]))));
  }

  function groupRow(g, lag) {
    const href = groupHash(g.streamPrefix, g.consumerGroup);
    const live = Object.keys(g.targetAssignmentSummary || {}).length;
    const m = g.activeMigration;
    return h('tr', {
      class: 'clickable',
      'data-group': `${g.streamPrefix}/${g.consumerGroup}`,
      onclick: (e) => {
        if (!e.target.closest('a')) location.hash = href;
      },
    },
    h('td', { class: 'mono' }, h('a', { href, text: g.streamPrefix })),
    h('td', { class: 'mono' }, h('a', { href, text: g.consumerGroup })),
    h('td', null, badge(g.state)),
    h('td', { class: 'num' }, shardsText(g)),
    h('td', { class: 'num mono', text: `${g.groupEpoch} · ${g.assignmentEpoch} · ${g.metadataVersion}` }),
    h('td', { class: 'num', text: String(live) }),
    h('td', null, m
      ? [h('span', { class: 'mono', text: `${m.fromShardCount} → ${m.toShardCount} ` }), badge(g.activeReshardingPhase || m.phase, 'phase'), ' ', badge(m.state)]
      : h('span', { class: 'muted', text: '—' })),
    h('td', { 'data-field': 'lag', title: lag ? LAG_STATUS[lag.lagStatus] || null : 'Redis not read' }, lag
      ? [badge(lag.lagStatus, 'lag'), h('span', { class: 'muted small', text: ` ${fmtSeconds(lag.lagSeconds)}` })]
      : h('span', { class: 'muted', text: '—' })));
  }

  function shardsText(g) {
    if (g.assignableShardCount === g.shardCount) return String(g.shardCount);
    return [String(g.shardCount), h('span', { class: 'muted small', text: ` (${g.assignableShardCount} assignable)` })];
  }

  // ---------------------------------------------------------------- group page

  class GroupPage {
    constructor(r) {
      this.prefix = r.prefix;
      this.group = r.group;
      this.base = groupAPI(r.prefix, r.group);
      this.at = null;
      this.lastLive = '';
      this.events = []; // ascending by id
      this.byId = new Map();
      this.after = null;
      this.replays = new Map(); // event id -> replay body (a replay never changes)

      this.stateSlot = h('span');
      this.stamp = h('span', { class: 'stamp' });
      this.banner = h('div', { class: 'asof', id: 'asof-banner', hidden: true });
      this.summary = h('div', { class: 'summary', id: 'summary' });
      this.grid = h('div', { class: 'card flush', id: 'grid' }, h('p', { class: 'empty', text: 'Loading…' }));
      this.resharding = h('div', { class: 'card', id: 'resharding' });
      this.autoscaling = h('div', { class: 'card', id: 'autoscaling' }, h('p', { class: 'muted', text: 'Loading…' }));
      this.historyRows = h('div', { class: 'events', id: 'history-rows' }, h('p', { class: 'empty', text: 'Loading…' }));
      this.historyCount = h('span', { class: 'muted small' });
      this.filter = h('input', {
        type: 'search', id: 'history-filter', placeholder: 'Filter: type, actor, request id…', 'aria-label': 'Filter events',
        oninput: () => this.applyFilter(),
      });

      // Write controls, where the session may change this prefix. They act on
      // the live group: hidden in a replay and until the group is loaded.
      this.live = null; // the last live answer, which the dialogs' stale checks read
      const again = () => {
        this.livePoll.start();
        this.historyPoll.start();
      };
      this.writable = [];
      if (writes.mayWrite(this.prefix)) {
        this.scaleCtl = writes.groupScale(this.prefix, this.group, again);
        this.scaleNow = h('div', { class: 'muted small', id: 'scale-current' });
        this.autoscalingCtl = writes.autoscalingControls(this.prefix, this.group, again);
        this.rollbackSlot = writes.statusSlot('rollback-status');
        this.rollbackFor = (m) => writes.rollbackButton(this.prefix, this.group, m, this.rollbackSlot,
          () => this.live && this.live.activeMigration, again);
        this.writable = [
          h('div', { class: 'write-section' }, h('h2', { text: 'Scale' }), h('div', { class: 'card', id: 'scale-card' }, this.scaleNow, this.scaleCtl.el)),
          h('div', { class: 'write-section' }, this.rollbackSlot),
          h('div', { class: 'write-section' }, this.autoscalingCtl.el),
        ];
        this.setWritable(false);
      }

      $('view').replaceChildren(h('div', { class: 'page' },
        h('div', { class: 'page-head' },
          h('h1', null, h('span', { class: 'mono', text: this.prefix }), h('span', { class: 'sep', text: ' / ' }), h('span', { class: 'mono', text: this.group }), ' ', this.stateSlot),
          this.stamp),
        this.banner,
        h('div', { class: 'group-layout' },
          h('div', { class: 'main-col' },
            this.summary,
            this.writable[0],
            h('h2', null, 'Ownership ', legend()),
            this.grid,
            h('h2', { text: 'Resharding' }),
            this.writable[1],
            this.resharding,
            h('h2', { text: 'Autoscaling' }),
            this.autoscaling,
            this.writable[2]),
          h('aside', { class: 'side-col' },
            h('h2', null, 'History ', this.historyCount),
            h('div', { class: 'card flush history', id: 'history' },
              h('div', { class: 'history-tools' }, this.filter),
              h('div', { class: 'history-scroll' }, this.historyRows))))));

      this.livePoll = new Poller(() => this.refreshLive(), REFRESH_MS);
      this.historyPoll = new Poller(() => this.refreshHistory(), REFRESH_MS);
      this.historyPoll.start();
      this.update(r);
    }

    accepts(r) {
      return r.name === 'group' && r.prefix === this.prefix && r.group === this.group;
    }

    update(r) {
      this.at = r.at;
      const crumbs = [{ text: 'Groups', href: '#/' }, { text: `${this.prefix} / ${this.group}`, href: r.at ? groupHash(this.prefix, this.group) : null }];
      if (r.at) crumbs.push({ text: `as of ${r.at}` });
      setCrumbs(crumbs);
      this.markSelected();
      if (r.at) {
        this.livePoll.stop();
        this.setWritable(false);
        setError('live', '');
        this.stamp.replaceChildren(h('span', { class: 'muted', text: 'Replay (not refreshed)' }));
        this.showReplay(r.at);
      } else {
        this.banner.hidden = true;
        this.banner.replaceChildren();
        this.lastLive = '';
        this.livePoll.start();
      }
    }

    stop() {
      this.livePoll.stop();
      this.historyPoll.stop();
    }

    setWritable(on) {
      for (const el of this.writable) el.hidden = !on;
    }

    async refreshLive() {
      const b = this.base;
      const data = await guarded('live', 'Refreshing the group', async () => {
        const [group, members, assignments, migrations, offsets, autoscaling] = await Promise.all([
          api(b), api(`${b}/members`), api(`${b}/assignments`), api(`${b}/migrations`),
          api(`${b}/offsets`).catch((e) => {
            if (e instanceof SignedOut) throw e;
            return { error: e.message };
          }),
          api(`${API}/streams/${enc(this.prefix)}/groups/${enc(this.group)}/autoscaling`).catch((e) => {
            if (e instanceof SignedOut) throw e;
            return { error: e.message };
          }),
        ]);
        return { group, members: members.members, assignments, migrations: migrations.migrations, activeId: migrations.activeReshardingId, offsets, autoscaling };
      }, () => this.renderMissing());
      if (!data || page !== this || this.at) return;
      liveStamp(this.stamp);
      const key = JSON.stringify(data);
      if (key === this.lastLive) return;
      this.lastLive = key;
      const active = data.activeId ? data.migrations.find((m) => m.reshardingId === data.activeId) || data.group.activeMigration : null;
      this.live = { group: data.group, activeMigration: active };
      this.render({
        group: data.group, members: data.members || [], assignments: data.assignments, migrations: data.migrations || [],
        activeMigration: active, offsets: data.offsets && !data.offsets.error ? data.offsets : null,
        offsetsError: data.offsets && data.offsets.error, replay: false, autoscaling: data.autoscaling,
      });
    }

    async showReplay(id) {
      const ev = this.byId.get(id);
      this.renderBanner(id, ev, true);
      let data = this.replays.get(id);
      if (!data) {
        try {
          data = await api(`${this.base}/replay?until=${enc(id)}`);
          setError('replay', '');
        } catch (e) {
          if (e instanceof SignedOut || page !== this || this.at !== id) return;
          if (e.status === 404 || e.status === 400) {
            this.renderBanner(id, ev, false);
            this.stateSlot.replaceChildren();
            this.summary.replaceChildren();
            this.grid.replaceChildren(h('p', { class: 'empty', text: e.message }));
            this.resharding.replaceChildren(h('p', { class: 'muted', text: '—' }));
            return;
          }
          setError('replay', `Loading the replay failed: ${e.message}.`);
          return;
        }
        this.replays.set(id, data);
      }
      if (page !== this || this.at !== id) return;
      this.renderBanner(id, this.byId.get(id), false, data.asOf);
      this.render({
        group: data, members: data.members || [], assignments: data.assignments, migrations: data.migrations || [],
        activeMigration: data.activeMigration, offsets: null, replay: true,
      });
    }

    // renderMissing shows a group that does not exist now (never created, or
    // deleted: the history of a deleted group stays readable).
    renderMissing() {
      if (page !== this || this.at) return;
      this.lastLive = '';
      this.live = null;
      this.setWritable(false);
      liveStamp(this.stamp);
      this.stateSlot.replaceChildren(badge('NOT FOUND'));
      this.summary.replaceChildren();
      this.grid.replaceChildren(h('p', { class: 'empty', id: 'group-missing', text: `There is no group ${this.prefix} / ${this.group} now. If it was deleted, its history stays readable: pick an event to see the group as it was.` }));
      this.resharding.replaceChildren(h('p', { class: 'muted', text: '—' }));
    }

    // asOf, when it is not id, is the last event of the decision id is in:
    // a replay shows the state after a whole decision, never between two of
    // its events.
    renderBanner(id, ev, loading, asOf) {
      const i = this.events.findIndex((e) => e.id === id);
      const prev = i > 0 ? this.events[i - 1] : null;
      const next = i >= 0 && i + 1 < this.events.length ? this.events[i + 1] : null;
      const step = (target, label, title) => (target
        ? h('a', { class: 'button', href: groupHash(this.prefix, this.group, target.id), title, text: label })
        : h('span', { class: 'button disabled', text: label }));
      this.banner.hidden = false;
      this.banner.replaceChildren(
        h('div', { class: 'asof-text' },
          h('div', null,
            h('strong', null, 'As of event ', h('span', { class: 'mono', id: 'asof-id', text: id })),
            ev ? [' · ', typeBadge(ev.type), ' · ', time(ev.time), ev.actor ? ` · by ${ev.actor}` : ''] : null,
            loading ? h('span', { class: 'muted', text: ' · loading…' }) : null,
            asOf && asOf !== id ? h('span', { class: 'muted', id: 'asof-end', text: ` · shown after ${asOf}, the last event of the same decision` }) : null),
          h('div', { class: 'muted small', text: 'The group as the coordinator believed it right after this event, folded from the log. Lag and pending are live Redis readings and are not shown.' })),
        h('div', { class: 'asof-actions' },
          step(prev, '◀ Earlier', prev && `${prev.type} ${prev.id}`),
          step(next, 'Later ▶', next && `${next.type} ${next.id}`),
          h('a', { class: 'button primary', id: 'back-to-live', href: groupHash(this.prefix, this.group), text: 'Back to live' })));
    }

    render(s) {
      const live = !s.replay && !!this.scaleCtl;
      if (live) this.renderWrites(s);
      this.stateSlot.replaceChildren(badge(s.group.state));
      this.summary.replaceChildren(...summaryCards(s).filter(Boolean));
      this.grid.replaceChildren(ownershipGrid(s));
      this.resharding.replaceChildren(reshardingPanel(s, this.prefix, this.group, live ? this.rollbackFor : null));
      this.autoscaling.replaceChildren(autoscalingPanel(s));
    }

    // renderWrites tells the write controls what the live group is now.
    renderWrites(s) {
      const g = s.group;
      const m = s.activeMigration;
      let blocked = null;
      if (m) blocked = `Resharding ${m.reshardingId} (${m.fromShardCount} → ${m.toShardCount}, ${m.state}) is active: another starts once it completes or is rolled back.`;
      else if ((g.barriers || []).length) blocked = 'Barriers of the last resharding still hold entries back: a new resharding starts once they are released.';
      this.scaleCtl.set({ from: g.shardCount, fromText: String(g.shardCount), blocked });
      this.scaleNow.textContent = `${g.shardCount} shard${g.shardCount === 1 ? '' : 's'} routed now.`;
      this.autoscalingCtl.set(s.autoscaling);
      this.setWritable(true);
    }

    async refreshHistory() {
      const added = [];
      for (let i = 0; i < 20; i++) {
        const q = `limit=${HISTORY_PAGE}${this.after ? `&after=${enc(this.after)}` : ''}`;
        const res = await guarded('history', 'Loading the history', () => api(`${this.base}/events?${q}`), () => {
          if (this.events.length === 0) this.historyRows.replaceChildren(h('p', { class: 'empty', text: 'No events for this group.' }));
        });
        if (page !== this) return;
        if (!res) break;
        for (const ev of res.events || []) {
          if (this.byId.has(ev.id)) continue;
          this.byId.set(ev.id, ev);
          this.events.push(ev);
          added.push(ev);
        }
        if (res.events && res.events.length) this.after = res.events[res.events.length - 1].id;
        if (!res.nextAfter) break;
      }
      if (added.length === 0) return;
      if (this.events.length === added.length) this.historyRows.replaceChildren(); // drop "Loading…" or "No events"
      const q = this.filter.value.trim().toLowerCase();
      for (const ev of added) {
        const row = eventItem(ev, this.prefix, this.group);
        row.hidden = q !== '' && !row.dataset.search.includes(q);
        this.historyRows.prepend(row);
      }
      this.historyCount.textContent = `${this.events.length} event${this.events.length === 1 ? '' : 's'}`;
      this.markSelected();
      if (this.at && this.byId.has(this.at)) this.renderBanner(this.at, this.byId.get(this.at), false);
    }

    applyFilter() {
      const q = this.filter.value.trim().toLowerCase();
      for (const row of this.historyRows.children) row.hidden = q !== '' && !(row.dataset.search || '').includes(q);
    }

    // markSelected highlights the replayed event and dims the ones after it.
    markSelected() {
      for (const row of this.historyRows.children) {
        row.classList.toggle('selected', row.dataset.id === this.at);
        row.classList.toggle('future', this.at != null && cmpID(row.dataset.id, this.at) > 0);
      }
      // Scroll the history list only: scrollIntoView would move the page too.
      const row = this.at && this.historyRows.querySelector(`[data-id="${CSS.escape(this.at)}"]`);
      const box = this.historyRows.parentElement;
      if (row && (row.offsetTop < box.scrollTop || row.offsetTop + row.offsetHeight > box.scrollTop + box.clientHeight)) {
        box.scrollTop = Math.max(0, row.offsetTop - box.clientHeight / 3);
      }
    }
  }

  function legend() {
    return h('span', { class: 'legend' },
      FLAGS.map(([f, , what]) => h('span', { class: 'legend-item' }, h('span', { class: `flag flag-${f}`, text: f }), what.split(':')[0])),
      h('span', { class: 'legend-item' }, h('span', { class: 'swatch removed' }), 'removed shard'));
  }

  function summaryCards(s) {
    const g = s.group;
    const live = s.members.filter((m) => m.state === 'ACTIVE' || m.state === 'STARTING').length;
    const m = s.activeMigration;
    const card = (label, field, value, sub) => h('div', { class: 'stat' },
      h('div', { class: 'stat-label', text: label }),
      h('div', { class: 'stat-value', 'data-field': field }, value),
      sub ? h('div', { class: 'stat-sub muted', text: sub }) : null);
    return [
      card('State', 'state', badge(g.state)),
      card('Routed shards', 'shardCount', String(g.shardCount), g.assignableShardCount !== g.shardCount ? `${g.assignableShardCount} assignable` : 'all assignable'),
      card('Epochs', 'epochs', `${g.groupEpoch} / ${g.assignmentEpoch}`, `group / assignment · metadata v${g.metadataVersion}`),
      card('Ordering', 'ordering', g.ordering || 'NONE', (g.barriers || []).length ? `${new Set(g.barriers.map((b) => b.shard.shardIndex)).size} shard(s) behind a barrier` : (g.ordering === 'KEY' ? 'per-key order kept' : null)),
      card('Members', 'members', `${live} live`, `${s.members.length} known`),
      card('Resharding', 'phase', m ? badge(m.phase, 'phase') : h('span', { class: 'muted', text: 'none' }), m ? `${m.fromShardCount} → ${m.toShardCount} · ${m.state}` : null),
      card('Updated', 'updatedAt', h('time', { datetime: g.updatedAt, title: g.updatedAt, text: fmtTime(g.updatedAt).slice(11, 19) }), fmtTime(g.updatedAt).slice(0, 10)),
      s.replay || !s.offsets ? null : card('Lag', 'lagStatus', h('span', { title: LAG_STATUS[s.offsets.lagStatus] || null }, badge(s.offsets.lagStatus, 'lag')),
        `${fmtSeconds(s.offsets.lagSeconds)} undelivered · ${fmtSeconds(s.offsets.oldestPendingSeconds)} pending`),
    ];
  }

  // LAG_STATUS says what each lag status means (docs/operations.md, "Lag and group status").
  const LAG_STATUS = {
    OK: 'nothing waits, or the group keeps up',
    WARN: 'the oldest unacknowledged entry grew older at every one of the last 5 reads',
    STALL: 'entries wait and the group has not read or acknowledged any for the last 5 reads',
    STOP: 'entries wait on a shard no member holds (for the last 2 reads)',
  };

  // fmtSeconds shows an age in seconds ("?" when unknown).
  function fmtSeconds(v) {
    if (v == null) return '?';
    if (v < 10) return `${v.toFixed(1)} s`;
    if (v < 3600) return `${Math.round(v)} s`;
    return `${(v / 3600).toFixed(1)} h`;
  }

  // ---------------------------------------------------------------- ownership grid

  const FLAGS = [
    ['T', 'targetAssignment', 'target: the assignor wants this member to own the shard'],
    ['C', 'currentAssignment', 'current: the member reported owning the shard'],
    ['G', 'grantedAssignment', 'granted: the coordinator allowed the member to own the shard'],
    ['R', 'revoking', 'revoking: the member must release the shard'],
  ];

  const liveState = (st) => st === 'ACTIVE' || st === 'STARTING';

  // ownershipGrid renders shards × members for a live view or a replay alike.
  function ownershipGrid(s) {
    const g = s.group;
    const mig = s.activeMigration;
    const members = s.members;
    let n = Math.max(g.shardCount, g.assignableShardCount);
    const sets = members.map((m) => {
      const set = {};
      for (const [f, field] of FLAGS) {
        set[f] = new Set(shardIdx(m[field]));
        for (const i of set[f]) n = Math.max(n, i + 1);
      }
      return set;
    });
    const drain = new Map();
    if (mig) {
      for (const r of mig.removedShards || []) n = Math.max(n, r.shardIndex + 1);
      for (const row of mig.drain || []) drain.set(row.shard.shardIndex, row);
    }
    const offsets = new Map();
    if (s.offsets) for (const o of s.offsets.shards || []) offsets.set(o.shard.shardIndex, o);

    const head = h('tr', null,
      h('th', { text: 'Shard' }),
      h('th', { text: 'Routing' }),
      members.map((m) => h('th', { class: `member${liveState(m.state) ? '' : ' gone'}`, 'data-member': m.memberId },
        h('div', { class: 'mono', text: m.memberName || m.memberId }),
        m.memberName && m.memberName !== m.memberId ? h('div', { class: 'mono muted small', text: m.memberId }) : null,
        h('div', { class: 'small' }, badge(m.state), h('span', { class: 'muted', title: 'member epoch', text: ` e${m.memberEpoch}` })))),
      s.replay ? null : [h('th', { class: 'num', text: 'Lag' }), h('th', { class: 'num', text: 'Pending' }),
        h('th', { class: 'num', title: 'age of the oldest entry not yet delivered to the group', text: 'Lag (s)' }),
        h('th', { class: 'num', title: 'age of the oldest entry delivered and not yet acknowledged', text: 'Oldest pending (s)' }),
        h('th', { text: 'Status' })]);

    const rows = [];
    for (let i = 0; i < n; i++) {
      const held = sets.filter((set) => set.C.has(i) || set.G.has(i) || set.R.has(i)).length;
      const removed = i >= g.shardCount;
      const cells = members.map((m, k) => {
        const set = sets[k];
        const flags = FLAGS.filter(([f]) => set[f].has(i));
        const cls = ['cell'];
        if (set.C.has(i)) cls.push('owned');
        if (set.R.has(i)) cls.push('revoking');
        if (held > 1 && (set.C.has(i) || set.G.has(i) || set.R.has(i))) cls.push('conflict');
        return h('td', {
          class: cls.join(' '),
          'data-flags': flags.map(([f]) => f).join(''),
          title: flags.length ? `${m.memberId} · shard ${i}\n${flags.map(([, , what]) => what).join('\n')}` : null,
        }, flags.map(([f]) => h('span', { class: `flag flag-${f}`, text: f })));
      });
      const off = offsets.get(i);
      rows.push(h('tr', { class: removed ? 'removed' : '', 'data-shard': i },
        h('th', { class: 'mono shard', text: String(i) }),
        h('td', null, routingLabel(i, g, drain.get(i), held > 0)),
        cells,
        s.replay ? null : lagCells(off, s)));
    }

    const parts = [];
    const violations = (s.assignments && s.assignments.invariantViolations) || [];
    if (violations.length) {
      parts.push(h('div', { class: 'violations', role: 'alert' },
        h('strong', { text: 'Invariant violations' }), h('ul', null, violations.map((v) => h('li', { text: v }))),
        s.replay ? h('div', { class: 'small muted', text: 'A replay shows the state after a whole decision; a log written before decisions were marked in it replays event by event, and between two events of one decision the state can be briefly inconsistent.' }) : null));
    }
    if (members.length === 0) parts.push(h('p', { class: 'empty', text: 'No members have joined this group.' }));
    parts.push(h('div', { class: 'grid-scroll' }, h('table', { class: 'table grid' }, h('thead', null, head), h('tbody', null, rows))));
    if (!s.replay) {
      if (s.offsets) {
        const o = s.offsets;
        parts.push(h('p', { class: 'grid-foot muted small' },
          `Redis: ${o.totalStreamLength} entries · pending ${o.totalPendingCount} · lag ${o.totalLag == null ? 'unknown' : o.totalLag}` +
          ` · oldest undelivered ${fmtSeconds(o.lagSeconds)} · oldest pending ${fmtSeconds(o.oldestPendingSeconds)} · status ${o.lagStatus}`));
      } else if (s.offsetsError) {
        parts.push(h('p', { class: 'grid-foot muted small', text: `Lag and pending unavailable: ${s.offsetsError}` }));
      }
    }
    return h('div', null, parts);
  }

  function routingLabel(i, g, drainRow, held) {
    if (i < g.shardCount) {
      if (i >= g.assignableShardCount) return h('span', { class: 'tag new', text: 'new · not assignable yet' });
      const b = (g.barriers || []).find((x) => x.shard.shardIndex === i);
      if (b) return h('span', { class: 'tag barrier', title: `entries after ${b.after} are held until ${b.waitingOn.map((w) => w.streamKey).join(', ')} are read up to their cutover`, text: 'routed · barrier' });
      return h('span', { class: 'tag', text: 'routed' });
    }
    let what = 'removed';
    if (drainRow && !drainRow.drained && i < g.assignableShardCount) what = 'removed · draining';
    else if (held && i >= g.assignableShardCount) what = 'removed · revoking';
    else if (drainRow && drainRow.drained) what = 'removed · drained';
    else if (i < g.assignableShardCount) what = 'removed · draining';
    return h('span', { class: 'tag removed', title: 'no longer routed: producers stopped writing here; owners keep it until Redis proves it drained', text: what });
  }

  function lagCells(off, s) {
    const dash = (title) => h('td', { class: 'num muted', title, text: '—' });
    if (!s.offsets) return [dash(), dash(), dash(), dash(), dash()];
    if (!off || !off.exists) return [dash('stream does not exist'), dash(), dash(), dash(), h('td', { 'data-field': 'lagStatus' }, badge(off ? off.lagStatus : null, 'lag'))];
    const age = (v, id, what) => h('td', { class: 'num', 'data-field': what, title: id ? `${id} (Redis time ${off.redisTimeMs})` : null },
      v == null ? h('span', { class: 'muted', title: 'no consumer group on this stream', text: '?' }) : h('span', { class: v > 0 ? 'nonzero' : '', text: v.toFixed(3) }));
    return [
      h('td', { class: 'num' }, num(off.lag, { unknownTitle: 'Redis reports lag as unknown (null)' })),
      h('td', { class: 'num' }, num(off.pendingCount)),
      age(off.lagSeconds, off.oldestUndeliveredId, 'lagSeconds'),
      age(off.oldestPendingSeconds, off.oldestPendingId, 'oldestPendingSeconds'),
      h('td', { 'data-field': 'lagStatus', title: LAG_STATUS[off.lagStatus] || null }, badge(off.lagStatus, 'lag')),
    ];
  }

  // ---------------------------------------------------------------- resharding

  const PHASES_IN = ['provisioning', 'converging', 'draining', 'revoking', 'retiring', 'done'];
  const PHASES_OUT = ['provisioning', 'converging', 'done'];

  // reshardingPanel: the active resharding (with rollbackFor's control, when
  // given), then the earlier ones.
  function reshardingPanel(s, prefix, group, rollbackFor) {
    const parts = [];
    const m = s.activeMigration;
    if (m) parts.push(migrationDetail(m, prefix, group, rollbackFor));
    else parts.push(h('p', { class: 'muted', id: 'no-resharding', text: 'No active resharding.' }));
    const past = s.migrations.filter((x) => !m || x.reshardingId !== m.reshardingId).reverse();
    if (past.length) {
      parts.push(h('h3', { text: m ? 'Earlier reshardings' : 'Past reshardings' }));
      for (const x of past) {
        parts.push(h('details', { class: 'past' },
          h('summary', null, h('span', { class: 'mono', text: x.reshardingId }), ` ${x.fromShardCount} → ${x.toShardCount} `, badge(x.state), h('span', { class: 'muted small' }, ' · ', time(x.updatedAt))),
          migrationDetail(x, prefix, group)));
      }
    }
    return h('div', null, parts);
  }

  function migrationDetail(m, prefix, group, rollbackFor) {
    const steps = m.kind === 'SCALE_IN' ? PHASES_IN : PHASES_OUT;
    const cur = steps.indexOf(m.phase);
    const rb = m.rollback || {};
    const fact = (k, ...v) => [h('dt', { text: k }), h('dd', null, ...v)];
    const parts = [
      h('div', { class: 'mig-head' },
        h('span', { class: 'mono strong', text: m.reshardingId }), ' ',
        badge(m.kind, 'kind'), ' ',
        h('span', { class: 'mono', text: `${m.fromShardCount} → ${m.toShardCount} shards` }), ' ',
        badge(m.state), ' ', badge(m.phase, 'phase')),
      h('ol', { class: 'steps', 'aria-label': 'phases' },
        steps.map((p, i) => h('li', { class: i < cur ? 'done' : i === cur ? 'current' : '', text: p }))),
      h('dl', { class: 'facts' },
        fact('Requested by', m.requestedBy || '—'),
        fact('Reason', m.reason || '—'),
        fact('Created', time(m.createdAt)),
        fact('Updated', time(m.updatedAt)),
        fact('Provisioning', `${m.provisioning.provisionedShards} / ${m.provisioning.totalShards} streams (${m.provisioning.state})`),
        fact('Drain proven', m.drainProven ? 'yes' : 'no'),
        fact('Rollback', h('span', { id: 'rollback', class: rb.eligible ? 'ok' : 'no', text: rb.eligible ? 'eligible' : 'not eligible' }),
          rb.reason ? h('span', { class: 'muted', text: ` — ${rb.reason}` }) : null,
          rb.policy ? h('span', { class: 'muted', text: ` (policy ${rb.policy})` }) : null,
          rollbackFor ? h('div', { class: 'rollback-action' }, rollbackFor(m)) : null),
        m.revokeProgress && (m.revokeProgress.started || m.revokeProgress.remaining > 0)
          ? fact('Revoke', `${m.revokeProgress.remaining} removed shard(s) still held`,
            Object.entries(m.revokeProgress.holding || {}).map(([id, refs]) => h('span', { class: 'muted mono', text: ` ${id}: ${ranges(shardIdx(refs))}` })))
          : null,
        m.retirement
          ? fact('Retirement', m.retirement.retired ? (m.retirement.kept ? 'streams kept' : `deleted ${m.retirement.streamKeys.join(', ')}`) : 'pending')
          : null),
    ];
    if (m.barriers && m.barriers.length) {
      parts.push(h('h4', { text: 'Ordering barriers (entries held back)' }), h('div', { class: 'grid-scroll' }, barrierTable(m.barriers)));
    }
    if (m.drain && m.drain.length) {
      parts.push(h('h4', { text: 'Drain of removed shards' }), h('div', { class: 'grid-scroll' }, drainTable(m.drain)));
    }
    if (m.stateHistory && m.stateHistory.length) {
      parts.push(h('h4', { text: 'State history' }), h('div', { class: 'grid-scroll' }, h('table', { class: 'table compact state-history' },
        h('thead', null, h('tr', null, ['State', 'Phase', 'At', 'Actor', 'Event', 'Epoch (group · meta)'].map((t) => h('th', { text: t })))),
        h('tbody', null, m.stateHistory.map((c) => h('tr', null,
          h('td', null, badge(c.state)),
          h('td', null, c.phase ? badge(c.phase, 'phase') : '—'),
          h('td', { class: 'small' }, time(c.at)),
          h('td', { text: c.actor || '—' }),
          h('td', { class: 'mono small' }, c.eventId ? h('a', { href: groupHash(prefix, group, c.eventId), title: 'Show the group as it was after this event', text: c.eventId }) : '—'),
          h('td', { class: 'mono small', text: `${c.groupEpoch} · ${c.metadataVersion}` })))))));
    }
    return h('div', { class: 'migration', 'data-resharding': m.reshardingId }, parts);
  }

  // autoscalingPanel: the policy, the load the leader's autoscaler sees, its
  // recommendation and its last decision (with why it held), and the last
  // change the log recorded.
  function autoscalingPanel(s) {
    if (s.replay) return h('p', { class: 'muted', text: 'Live only: the load is read from Redis.' });
    const a = s.autoscaling;
    if (!a || a.error) return h('p', { class: 'muted', text: a && a.error ? `Unavailable: ${a.error}` : '—' });
    const p = a.policy;
    if (!p) return h('p', { class: 'muted', id: 'autoscaling-none', text: 'Not configured: the shard count changes only when an operator scales it.' });
    const fact = (k, ...v) => [h('dt', { text: k }), h('dd', null, ...v)];
    const state = !p.enabled ? 'off' : p.dryRun ? 'on · dry run (recommends, does not act)' : 'on';
    const parts = [h('dl', { class: 'facts' },
      fact('State', h('span', { id: 'autoscaling-state', class: p.enabled ? 'ok' : 'muted', text: state })),
      fact('Policy', `${p.minShards}–${p.maxShards} shards · target ${p.targetEntriesPerSecondPerShard} entries/s per shard` +
        (p.maxLagSecondsPerShard != null ? ` · max lag ${p.maxLagSecondsPerShard}s` : '') +
        ` · window ${p.evaluationWindowSeconds}s · cooldowns ${p.scaleOutCooldownSeconds}s out / ${p.scaleInCooldownSeconds}s in · step ×${p.maxStepFactor}`),
      fact('Set', `by ${p.requestedBy} `, time(p.configuredAt), p.reason ? h('span', { class: 'muted', text: ` — ${p.reason}` }) : null),
      a.load ? fact('Load', `${a.load.entriesPerSecond.toFixed(1)} entries/s over ${Math.round(a.load.windowSeconds)}s` +
        (a.load.complete ? '' : ' (window not complete yet)') + ` · lag ${a.load.lag == null ? 'unknown' : a.load.lag} · oldest unread ${a.load.maxLagSeconds.toFixed(1)}s`) : null,
      a.recommendation ? fact('Recommends', h('span', { id: 'autoscaling-recommendation', text: `${a.recommendation.shardCount} shards` })) : null,
      a.lastDecision ? fact('Last decision', badge(a.lastDecision.outcome), ` ${a.lastDecision.from} → ${a.lastDecision.to} `, time(a.lastDecision.at),
        h('div', { class: 'muted small', id: 'autoscaling-reason', text: a.lastDecision.reason })) : null,
      a.lastChange ? fact('Last change', badge(a.lastChange.outcome), ` ${a.lastChange.from} → ${a.lastChange.to} `, time(a.lastChange.at),
        a.lastChange.reshardingId ? h('span', { class: 'mono small', text: ` ${a.lastChange.reshardingId}` }) : null) : null)];
    if (a.load && a.load.shards && a.load.shards.length) {
      parts.push(h('div', { class: 'grid-scroll' }, h('table', { class: 'table compact autoscaling-load' },
        h('thead', null, h('tr', null, ['Shard', 'Entries/s', 'Lag', 'Oldest unread'].map((t) => h('th', { text: t })))),
        h('tbody', null, a.load.shards.map((x) => h('tr', null,
          h('td', { class: 'mono', text: String(x.shard.shardIndex) }),
          h('td', { class: 'num', text: x.entriesPerSecond.toFixed(1) }),
          h('td', { class: 'num' }, num(x.lag, { unknownTitle: 'Redis reports lag as unknown (null)' })),
          h('td', { class: 'num', text: `${x.lagSeconds.toFixed(1)}s` })))))));
    }
    return h('div', null, parts);
  }

  function drainTable(rows) {
    return h('table', { class: 'table compact drain' },
      h('thead', null, h('tr', null,
        ['Shard', 'Stream', 'Redis pending', 'Redis lag', 'Consumer groups', 'Owners', 'Member-reported pending', 'Drained', 'Evidence']
          .map((t) => h('th', { text: t })))),
      h('tbody', null, rows.map((r) => h('tr', { 'data-shard': r.shard.shardIndex },
        h('td', { class: 'mono', text: String(r.shard.shardIndex) }),
        h('td', { class: 'mono small nowrap' }, r.streamKey, r.exists || r.evidenceSource === 'none' ? null : h('span', { class: 'muted', text: ' (gone)' })),
        h('td', { class: 'num' }, num(r.redisPending, { unknown: '—' })),
        h('td', { class: 'num' }, num(r.redisLag, { unknown: r.evidenceSource === 'none' ? '—' : '?', unknownTitle: 'unknown: Redis reported lag=null or no evidence yet' })),
        h('td', { class: 'small' }, (r.groups || []).map((gd) => h('div', { class: 'mono', text: `${gd.name}: pending ${gd.pending}, lag ${gd.lag == null ? '?' : gd.lag}` }))),
        h('td', { class: 'mono small', text: (r.owners || []).join(', ') || '—' }),
        h('td', { class: 'num' }, num(r.memberReportedPending, { unknown: '—' })),
        h('td', { class: 'nowrap' }, r.drained ? h('span', { class: 'ok', text: '✓ drained' }) : h('span', { class: 'no', text: 'not yet' })),
        h('td', { class: 'small muted nowrap' }, evidence(r.evidenceSource))))));
  }

  // barrierTable: one row per waiting barrier: which shard holds its entries
  // after which id, since when, and on which shards (up to which id) it
  // waits, with what Redis last showed of them.
  function barrierTable(rows) {
    return h('table', { class: 'table compact barriers' },
      h('thead', null, h('tr', null,
        ['Shard', 'Holds entries after', 'Waiting since', 'Waiting on', 'Fence']
          .map((t) => h('th', { text: t })))),
      h('tbody', null, rows.map((b) => h('tr', { 'data-barrier-shard': b.shard.shardIndex },
        h('td', { class: 'mono', text: String(b.shard.shardIndex) }),
        h('td', { class: 'mono small', text: b.after }),
        h('td', { class: 'small' }, time(b.since)),
        h('td', { class: 'small' }, (b.waitingOn || []).map((src) => h('div', { class: 'mono', 'data-source': src.streamKey },
          `${src.streamKey} up to ${src.cutoverId}: `,
          src.proven ? h('span', { class: 'ok', text: '✓ read and acknowledged' })
            : src.checkedAt ? h('span', { class: 'no', text: `delivered to ${src.lastDeliveredId || '—'}, ${src.pendingToCutover} pending` })
              : h('span', { class: 'muted', text: 'not read yet' }),
          src.checkedAt ? h('span', { class: 'muted', text: ` (${fmtClock(new Date(src.checkedAt))})` }) : null))),
        h('td', { class: 'mono small', text: `v${b.fence}` })))));
  }

  // evidence renders "redis@<time>" (a live reading), "log" or "none".
  function evidence(src) {
    if (src && src.startsWith('redis@')) {
      const at = src.slice(6);
      return h('span', { title: `read from Redis at ${at}`, text: `Redis ${fmtClock(new Date(at))}` });
    }
    return src === 'log' ? h('span', { title: 'the last evidence written to the log', text: 'log' }) : '—';
  }

  // ---------------------------------------------------------------- history

  function typeBadge(type) {
    const ns = String(type).split('.')[0];
    return h('span', { class: `evtype ns-${lower(ns)}${type === 'command.rejected' ? ' rejected' : ''}`, text: type });
  }

  // Fields every epoch-bearing event carries; they add noise to a one-line summary.
  const QUIET = new Set(['groupepoch', 'assignmentepoch', 'metadataversion']);

  // summarize renders an event payload as "key=value · key=value", short.
  function summarize(p) {
    if (p == null || typeof p !== 'object') return p == null ? '' : String(p);
    const parts = [];
    for (const [k, v] of Object.entries(p)) {
      if (QUIET.has(k.toLowerCase())) continue;
      if (v == null || v === '' || v === false) continue;
      if (Array.isArray(v) && v.length === 0) continue;
      if (typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0) continue;
      const name = k.charAt(0).toLowerCase() + k.slice(1);
      parts.push(`${name}=${shortValue(v)}`);
    }
    const s = parts.join(' · ');
    return s.length > 240 ? `${s.slice(0, 239)}…` : s;
  }

  function shortValue(v) {
    if (Array.isArray(v) && v.every((x) => Number.isInteger(x))) return `[${ranges(v)}]`;
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => Array.isArray(x) && x.every(Number.isInteger))) {
      return `{${Object.entries(v).map(([k, x]) => `${k}: ${ranges(x) || '∅'}`).join('; ')}}`;
    }
    const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
    return s.length > 80 ? `${s.slice(0, 79)}…` : s;
  }

  // eventItem is one history entry, a link to the replay after that event.
  function eventItem(ev, prefix, group) {
    const summary = summarize(ev.payload);
    const item = h('a', {
      class: 'ev',
      href: groupHash(prefix, group, ev.id),
      'data-id': ev.id,
      'data-type': ev.type,
      title: 'Show the group as it was after this event',
    },
    h('div', { class: 'ev-line' }, typeBadge(ev.type), h('span', { class: 'small muted nowrap' }, time(ev.time))),
    summary ? h('div', { class: 'ev-summary mono small', title: JSON.stringify(ev.payload, null, 2), text: summary }) : null,
    h('div', { class: 'ev-meta small muted' },
      h('span', { class: 'mono', text: ev.id }), ' · ', h('span', { title: 'actor', text: ev.actor || '—' }),
      ev.requestId ? [' · ', h('span', { class: 'mono', title: 'request id', text: ev.requestId })] : null));
    item.dataset.search = `${ev.id} ${ev.type} ${ev.actor || ''} ${ev.requestId || ''} ${summary}`.toLowerCase();
    return item;
  }

  // cmpID orders Redis stream ids ("<ms>-<seq>") numerically.
  function cmpID(a, b) {
    const [am, as] = String(a).split('-').map(Number);
    const [bm, bs] = String(b).split('-').map(Number);
    return am - bm || as - bs;
  }

  // ---------------------------------------------------------------- theme and start

  function applyTheme(theme) {
    if (theme === 'light' || theme === 'dark') document.documentElement.dataset.theme = theme;
    else delete document.documentElement.dataset.theme;
  }

  function toggleTheme() {
    const current = document.documentElement.dataset.theme ||
      (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
    const next = current === 'dark' ? 'light' : 'dark';
    localStorage.setItem(THEME_KEY, next);
    applyTheme(next);
  }

  applyTheme(localStorage.getItem(THEME_KEY));
  $('theme').addEventListener('click', toggleTheme);
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => signOut('Signed out.'));
  window.addEventListener('hashchange', route);
  // Timers of a hidden tab may run late: look at the expiry when it shows again.
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && session) token();
  });
  resume();
})();
