// Console writes: the controls that change the coordinator (create a stream or
// a group, scale a stream or a group, roll back the active resharding, set or
// turn off an autoscaling policy). Each opens a confirm dialog that names what
// will happen and shows the exact request; nothing is sent before the operator
// confirms, and nothing is sent twice: a request is never retried, a failure is
// shown next to the control that asked for it.
//
// Requests go to this origin only, with the bearer token of the session and
// Content-Type: application/json (never Basic credentials, never cookies).
// requestedBy is the signed-in user; the reason is the console's, as the
// reference console's ("console stream create", "console shard scale", ...),
// followed by what the operator typed in the dialog, if anything.
//
// app.js calls rscConsoleWrites(deps) once and places the controls it returns.
// Controls are offered only where mayWrite(prefix) holds; the server decides
// anyway (403 outside the principal's role or prefixes).
'use strict';

window.rscConsoleWrites = (deps) => {
  const { h, API } = deps;
  const enc = encodeURIComponent;

  // MAX_TEXT_BYTES bounds requestedBy and reason (README, Security: "Every
  // input is bounded"); the coordinator refuses longer ones.
  const MAX_TEXT_BYTES = 256;
  const REASONS = {
    streamCreate: 'console stream create',
    groupCreate: 'console group create',
    scale: 'console shard scale',
    rollback: 'console rollback',
    autoscalingSet: 'console autoscaling set',
    autoscalingOff: 'console autoscaling disable',
  };

  const utf8Bytes = (s) => new TextEncoder().encode(s).length;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const shards = (n) => plural(n, 'shard', 'shards');

  // ---------------------------------------------------------------- who may write

  // covers reports whether a session's prefixes include prefix: null or
  // absent covers every prefix; otherwise exact names, or a name prefix
  // followed by one trailing '*'. Anything else covers nothing.
  function covers(prefixes, prefix) {
    if (prefixes === undefined || prefixes === null) return true;
    if (!Array.isArray(prefixes)) return false;
    return prefixes.some((p) => typeof p === 'string' &&
      (p.endsWith('*') ? prefix.startsWith(p.slice(0, -1)) : p === prefix));
  }

  function writesAtAll() {
    const s = deps.session();
    return !!s && s.roles.some((r) => r === 'WRITE' || r === 'ADMIN');
  }

  // mayWrite: the session's roles may mutate and its scope covers prefix.
  function mayWrite(prefix) {
    return writesAtAll() && covers(deps.session().prefixes, prefix);
  }

  // mayWriteSomewhere: some prefix could be written (an empty scope is none).
  function mayWriteSomewhere() {
    const s = deps.session();
    return writesAtAll() && (s.prefixes == null || (Array.isArray(s.prefixes) && s.prefixes.length > 0));
  }

  // ---------------------------------------------------------------- requests

  class Refused extends Error {}
  // NotSent: the session ended first; app.js has signed out and said so.
  class NotSent extends Error {}

  async function send(method, path, body, what) {
    const token = deps.token();
    if (!token) throw new NotSent(`Not sent: ${what}.`);
    let res;
    try {
      res = await fetch(path, {
        method,
        mode: 'same-origin',
        credentials: 'omit',
        redirect: 'error',
        cache: 'no-store',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify(body),
      });
    } catch (e) {
      throw new Refused(`No answer from the coordinator (${e.message}): it may or may not have done it. Check the history before you repeat it.`);
    }
    let data = null;
    try {
      data = await res.json();
    } catch (_) {
      // 401 and 403 have empty bodies; a proxy's page is not JSON either.
    }
    if (res.status === 401) throw new NotSent(`Refused because the session had ended, so it was not done: ${what}.`);
    if (!res.ok) throw new Refused(refusal(res, data));
    return data;
  }

  // refusal renders an ErrorResponse (or an empty-bodied 403) as one line.
  function refusal(res, data) {
    const code = data && typeof data.errorCode === 'string' ? ` ${data.errorCode}` : '';
    let msg = data && typeof data.message === 'string' && data.message ? data.message : '';
    if (!msg && res.status === 403) msg = 'this account may not do this here (its role or its stream prefixes do not allow it)';
    let s = `Refused (HTTP ${res.status}${code})${msg ? `: ${msg}` : ''}.`;
    const retry = res.headers.get('Retry-After');
    if (res.status === 429 && retry) s += ` Nothing was retried; try again in ${retry} s.`;
    return s;
  }

  // ---------------------------------------------------------------- status slots

  function statusSlot(id) {
    return h('div', { class: 'write-status', id, role: 'status', 'aria-live': 'polite', hidden: true });
  }

  function setStatus(slot, kind, ...content) {
    slot.className = `write-status ${kind || ''}`;
    slot.replaceChildren(...content);
    slot.hidden = content.length === 0;
  }

  // ---------------------------------------------------------------- confirm dialog

  const dialog = {
    el: null, title: null, text: null, note: null, reason: null, route: null, body: null, error: null, cancel: null, ok: null,
  };
  let current = null; // the action the dialog shows: { spec, slot, sending }

  function buildDialog() {
    dialog.title = h('h2', { id: 'confirm-title' });
    dialog.text = h('p', { id: 'confirm-text', class: 'confirm-text' });
    dialog.note = h('p', { id: 'confirm-note', class: 'confirm-note', hidden: true });
    dialog.reason = h('input', { id: 'confirm-reason', autocomplete: 'off', maxlength: 200, placeholder: 'why (recorded in the history)', oninput: () => showRequest() });
    dialog.route = h('div', { id: 'confirm-route', class: 'mono small' });
    dialog.body = h('pre', { id: 'confirm-body', class: 'mono small' });
    dialog.error = h('p', { id: 'confirm-error', class: 'error', role: 'alert', hidden: true });
    dialog.cancel = h('button', { type: 'button', id: 'confirm-cancel', text: 'Cancel', onclick: () => cancel() });
    dialog.ok = h('button', { type: 'button', id: 'confirm-ok', class: 'primary', onclick: () => proceed() });
    dialog.el = h('dialog', { id: 'confirm', class: 'confirm', 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text' },
      dialog.title, dialog.text, dialog.note,
      h('label', { class: 'confirm-reason' }, 'Reason (optional) ', dialog.reason),
      h('div', { class: 'confirm-request' }, h('div', { class: 'muted small', text: 'The request it sends:' }), dialog.route, dialog.body),
      dialog.error,
      h('div', { class: 'confirm-actions' }, dialog.cancel, dialog.ok));
    // Escape closes a modal dialog: the same as Cancel, except while sending.
    dialog.el.addEventListener('cancel', (e) => {
      e.preventDefault();
      if (!current || !current.sending) cancel();
    });
    document.body.append(dialog.el);
  }

  // audited is the request body with the audit fields of this session.
  function audited(spec) {
    const typed = dialog.reason.value.trim();
    const reason = typed ? `${spec.reason}: ${typed}` : spec.reason;
    return { ...spec.body, requestedBy: deps.session().username, reason };
  }

  function showRequest() {
    if (!current) return;
    const body = audited(current.spec);
    dialog.route.textContent = `${current.spec.method} ${current.spec.path}`;
    dialog.body.textContent = JSON.stringify(body, null, 2);
    const n = utf8Bytes(body.reason);
    const problem = n > MAX_TEXT_BYTES ? `The reason is ${n} bytes; the coordinator takes at most ${MAX_TEXT_BYTES}. Shorten it.` : '';
    dialog.error.textContent = problem;
    dialog.error.hidden = !problem;
    dialog.ok.disabled = !!problem || !!current.stale;
  }

  // act opens the confirm dialog for spec; slot is where its outcome goes.
  //   spec: { title, text, note?, okLabel, danger?, method, path, body, reason,
  //           stale?() -> why the dialog no longer matches the state (or null),
  //           done(answer) -> [nodes] for the slot, after?() }
  function act(slot, spec) {
    if (current) return;
    if (!deps.token()) return; // the session just ended; app.js shows sign-in
    if (!dialog.el) buildDialog();
    current = { spec, slot, sending: false, stale: null };
    setStatus(slot, '');
    dialog.title.textContent = spec.title;
    dialog.text.textContent = capital(spec.text);
    dialog.note.textContent = spec.note || '';
    dialog.note.hidden = !spec.note;
    dialog.note.className = 'confirm-note';
    dialog.reason.value = '';
    dialog.reason.disabled = false;
    dialog.cancel.disabled = false;
    dialog.ok.textContent = spec.okLabel;
    dialog.ok.className = spec.danger ? 'danger' : 'primary';
    showRequest();
    dialog.el.showModal();
    dialog.cancel.focus();
  }

  function close() {
    current = null;
    if (dialog.el && dialog.el.open) dialog.el.close();
  }

  function cancel() {
    if (!current || current.sending) return;
    close();
  }

  async function proceed() {
    const c = current;
    if (!c || c.sending) return;
    const why = c.spec.stale && c.spec.stale();
    if (why) {
      // What the dialog names is no longer what would happen: send nothing.
      c.stale = why;
      dialog.note.textContent = `${why} Nothing was sent: cancel and choose again.`;
      dialog.note.hidden = false;
      dialog.note.className = 'confirm-note warn';
      dialog.ok.disabled = true;
      return;
    }
    const body = audited(c.spec);
    if (utf8Bytes(body.reason) > MAX_TEXT_BYTES) return;
    c.sending = true;
    dialog.ok.disabled = true;
    dialog.cancel.disabled = true;
    dialog.reason.disabled = true;
    dialog.ok.textContent = 'Sending…';
    // The page may have changed while the request was in flight: an answer
    // whose control is gone goes to the page's notice instead.
    const show = (kind, nodes) => {
      if (c.slot.isConnected) setStatus(c.slot, kind, ...nodes);
      else deps.notice(kind, nodes);
    };
    let outcome;
    try {
      const answer = await send(c.spec.method, c.spec.path, body, c.spec.text);
      close();
      show('ok', [c.spec.done(answer)].flat());
      outcome = `It was accepted before that: ${c.spec.text}.`;
      if (c.spec.after) c.spec.after();
    } catch (e) {
      close();
      if (e instanceof NotSent) {
        deps.sessionEnded(e.message);
        return;
      }
      const msg = e instanceof Refused ? e.message : `Failed: ${e.message}`;
      show('err', [`${capital(c.spec.text)}: ${msg}`]);
      outcome = `It was not done: ${c.spec.text}. ${msg}`;
    }
    deps.settled(outcome);
  }

  // abandon closes a dialog that was not sent yet (the session ends) and
  // says what was dropped; null when none was open.
  function abandon() {
    if (!current || current.sending) return null;
    const what = current.spec.text;
    close();
    return `Not sent: ${what}.`;
  }

  const busy = () => !!current && current.sending;
  const isOpen = () => !!current;
  const capital = (s) => s.charAt(0).toUpperCase() + s.slice(1);

  // ---------------------------------------------------------------- names

  // nameProblem mirrors the coordinator's rule for prefixes and group names
  // (README, Security) so that a typo is caught before the dialog; the
  // coordinator checks again.
  function nameProblem(what, v) {
    if (v === '') return `Give a ${what}.`;
    if (utf8Bytes(v) > 200) return `The ${what} is longer than 200 bytes.`;
    if (/[{}*?[\]\s\p{Cc}]/u.test(v)) return `The ${what} may not contain { } * ? [ ], whitespace or control characters.`;
    return null;
  }

  function scopeText() {
    const p = deps.session().prefixes;
    return Array.isArray(p) ? p.join(', ') : 'every prefix';
  }

  // ---------------------------------------------------------------- create

  // createPanel: a form that creates a stream (POST /streams/{p}) or a
  // consumer group (POST /streams/{p}/groups/{g}).
  function createPanel(after) {
    const slot = statusSlot('create-status');
    const kindStream = h('input', { type: 'radio', name: 'create-kind', id: 'create-kind-stream', value: 'stream', checked: true, onchange: () => sync() });
    const kindGroup = h('input', { type: 'radio', name: 'create-kind', id: 'create-kind-group', value: 'group', onchange: () => sync() });
    const prefix = h('input', { id: 'create-prefix', autocomplete: 'off', spellcheck: 'false', placeholder: 'orders' });
    const group = h('input', { id: 'create-group', autocomplete: 'off', spellcheck: 'false', placeholder: 'billing' });
    const groupField = h('label', { class: 'field', hidden: true }, 'Consumer group', group);
    const count = h('input', { id: 'create-shards', type: 'number', min: 0, step: 1, inputmode: 'numeric', placeholder: 'default' });
    const submit = h('button', { type: 'submit', id: 'create-submit', class: 'primary', text: 'Create…' });
    const sync = () => {
      groupField.hidden = !kindGroup.checked;
    };
    const form = h('form', { id: 'create-form', class: 'write-form', autocomplete: 'off', onsubmit: (e) => {
      e.preventDefault();
      ask();
    } },
    h('fieldset', { class: 'kind' }, h('legend', { class: 'sr-only', text: 'What to create' }),
      h('label', null, kindStream, ' Stream'), h('label', null, kindGroup, ' Consumer group')),
    h('label', { class: 'field' }, 'Stream prefix', prefix),
    groupField,
    h('label', { class: 'field narrow' }, 'Shards', count),
    submit);

    function ask() {
      const isGroup = kindGroup.checked;
      const p = prefix.value.trim();
      const g = group.value.trim();
      const problem = nameProblem('stream prefix', p) || (isGroup ? nameProblem('consumer group name', g) : null);
      if (problem) {
        setStatus(slot, 'err', problem);
        return;
      }
      if (!mayWrite(p)) {
        setStatus(slot, 'err', `${p} is outside the prefixes this account may change (${scopeText()}).`);
        return;
      }
      const raw = count.value.trim();
      const n = raw === '' ? null : Number(raw);
      if (n !== null && !(Number.isInteger(n) && n >= 0)) {
        setStatus(slot, 'err', 'Shards: a whole number, 0 or more (leave it empty for the default).');
        return;
      }
      const body = n === null ? {} : { initialShardCount: n };
      const size = n === null ? 'the default shard count' : shards(n);
      if (isGroup) {
        act(slot, {
          title: 'Create a consumer group?', okLabel: 'Create group',
          text: `create consumer group ${p}/${g} with ${size}`,
          note: n === null ? 'The coordinator picks the count: the stream\'s, when it has one, else its --default-shard-count.' : null,
          method: 'POST', path: `${API}/streams/${enc(p)}/groups/${enc(g)}`, body, reason: REASONS.groupCreate,
          done: (r) => [`Created consumer group ${p}/${g} with ${shards(r.shardCount)}. `,
            h('a', { href: `#/group/${enc(p)}/${enc(g)}`, text: 'Open it' })],
          after,
        });
      } else {
        act(slot, {
          title: 'Create a stream?', okLabel: 'Create stream',
          text: `create stream ${p} with ${size}`,
          method: 'POST', path: `${API}/streams/${enc(p)}`, body, reason: REASONS.streamCreate,
          done: (r) => `Created stream ${r.streamPrefix} with ${shards(r.shardCount)} (metadata version ${r.metadataVersion}).`,
          after,
        });
      }
    }

    return h('div', { class: 'card write', id: 'create-card' },
      h('h2', { text: 'Create' }),
      h('p', { class: 'muted small', text: 'A stream is its shard keys <prefix>:0…n−1; consumer groups of it read them.' }),
      form, slot);
  }

  // ---------------------------------------------------------------- scale

  // scaleControl: −1, +1 and a target for one stream or one group.
  //   o: { ids?: true for the group page's element ids, subject, path,
  //        done(answer) -> nodes, after() }
  // set({ from, fromText, blocked }) tells it the current count (null when
  // the groups of a stream disagree) and why it may not scale now.
  function scaleControl(o) {
    const id = (name) => (o.ids ? `scale-${name}` : null);
    let state = { from: null, fromText: '?', blocked: null };
    const slot = statusSlot(id('status'));
    const minus = h('button', { type: 'button', id: id('minus'), class: 'scale-minus', text: '−1', onclick: () => ask(state.from - 1) });
    const plus = h('button', { type: 'button', id: id('plus'), class: 'scale-plus', text: '+1', onclick: () => ask(state.from + 1) });
    const target = h('input', {
      type: 'number', id: id('target'), class: 'scale-target', min: 0, step: 1, inputmode: 'numeric', placeholder: 'target', 'aria-label': 'target shard count',
      onkeydown: (e) => {
        if (e.key === 'Enter') {
          e.preventDefault();
          askTarget();
        }
      },
    });
    const go = h('button', { type: 'button', id: id('submit'), class: 'scale-submit', text: 'Scale…', onclick: () => askTarget() });
    const hint = h('div', { class: 'muted small scale-hint', hidden: true });

    function askTarget() {
      const raw = target.value.trim();
      const n = Number(raw);
      if (raw === '' || !Number.isInteger(n) || n < 0) {
        setStatus(slot, 'err', 'Target: a whole number of shards, 0 or more.');
        return;
      }
      ask(n);
    }

    function ask(to) {
      if (state.blocked) {
        setStatus(slot, 'err', state.blocked);
        return;
      }
      if (state.from !== null && to === state.from) {
        setStatus(slot, 'err', `It already has ${shards(to)}.`);
        return;
      }
      const asked = state;
      const drain = to === 0;
      act(slot, {
        title: drain ? 'Drain every shard?' : 'Scale?',
        okLabel: drain ? 'Drain all shards' : 'Scale',
        danger: drain,
        text: `scale ${o.subject} from ${asked.fromText} to ${shards(to)}`,
        note: drain
          ? '0 is a full drain: producers get no shard to write to, the members finish what is on every shard, then the shards are revoked and retired. Nothing can be published until it is scaled out again.'
          : null,
        method: 'POST', path: o.path, body: { targetShardCount: to }, reason: REASONS.scale,
        stale: () => (state.fromText !== asked.fromText
          ? `It has ${state.fromText} shard(s) now, not ${asked.fromText} as when this opened.`
          : state.blocked),
        done: o.done,
        after: () => {
          target.value = '';
          o.after();
        },
      });
    }

    function set(s) {
      state = s;
      const unknown = s.from === null;
      minus.disabled = unknown || s.from <= 0 || !!s.blocked;
      plus.disabled = unknown || !!s.blocked;
      go.disabled = !!s.blocked;
      minus.title = unknown ? 'its groups have different shard counts: give a target' : s.from <= 0 ? 'it has no shard' : `to ${shards(s.from - 1)}`;
      plus.title = unknown ? 'its groups have different shard counts: give a target' : `to ${shards(s.from + 1)}`;
      hint.textContent = s.blocked || '';
      hint.hidden = !s.blocked;
    }

    const el = h('div', { class: 'scale-control write' },
      h('div', { class: 'scale-buttons' }, minus, plus, h('span', { class: 'sep', text: '·' }), target, go), hint, slot);
    return { el, set };
  }

  function streamScale(prefix, after) {
    return scaleControl({
      subject: `stream ${prefix}`,
      path: `${API}/streams/${enc(prefix)}/scale`,
      done: (r) => {
        const ms = (r.migrations || []).map((m) => `${m.reshardingId} (${m.fromShardCount} → ${m.toShardCount}, ${m.state})`);
        return `Scale of stream ${r.streamPrefix} to ${shards(r.targetShardCount)} requested: ` +
          `${(r.affectedConsumerGroups || []).join(', ') || 'no consumer group'}${ms.length ? `; ${ms.join(', ')}` : ''}.`;
      },
      after,
    });
  }

  function groupScale(prefix, group, after) {
    return scaleControl({
      ids: true,
      subject: `${prefix}/${group}`,
      path: `${API}/streams/${enc(prefix)}/groups/${enc(group)}/scale`,
      done: (m) => `Resharding ${m.reshardingId} requested: ${m.fromShardCount} → ${m.toShardCount} (${m.state}).`,
      after,
    });
  }

  // ---------------------------------------------------------------- rollback

  // rollbackButton offers the rollback the migration object allows: plain
  // when eligible, "policy":"drain" when only a drain can undo it; none when
  // neither (the migration's reason says why, next to it).
  //   current() -> the group's active resharding now, for the stale check.
  function rollbackButton(prefix, group, m, slot, current, after) {
    const rb = m.rollback || {};
    const drain = !rb.eligible && rb.policy === 'drain';
    if (!rb.eligible && !drain) return null;
    const text = `roll back resharding ${m.reshardingId} of ${prefix}/${group}: from ${m.toShardCount} back to ${shards(m.fromShardCount)}` +
      (drain ? ', draining the new shards' : '');
    const note = drain
      ? `${capital(rb.reason || 'a plain rollback is not allowed')}. With it, producers route to ${shards(m.fromShardCount)} at once and the new shards are drained like a scale-in: ROLLING_BACK, then ROLLED_BACK.`
      : rb.reason || null;
    return h('button', {
      type: 'button', id: 'rollback-button', class: 'danger write', 'data-policy': drain ? 'drain' : 'plain',
      text: drain ? 'Roll back with drain…' : 'Roll back…',
      onclick: () => act(slot, {
        title: 'Roll back?', okLabel: drain ? 'Roll back with drain' : 'Roll back', danger: true,
        text, note,
        method: 'POST', path: `${API}/streams/${enc(prefix)}/groups/${enc(group)}/migrations/${enc(m.reshardingId)}/rollback`,
        body: drain ? { policy: 'drain' } : {}, reason: REASONS.rollback,
        stale: () => {
          const now = current();
          if (!now || now.reshardingId !== m.reshardingId) return `Resharding ${m.reshardingId} is no longer active.`;
          const r = now.rollback || {};
          if (!!r.eligible !== !!rb.eligible || (r.policy || '') !== (rb.policy || '')) return `What a rollback may do changed: ${r.reason || 'not eligible'}.`;
          return null;
        },
        done: (v) => `Rollback of ${v.reshardingId} requested (${v.state}).`,
        after,
      }),
    });
  }

  // ---------------------------------------------------------------- autoscaling

  // The policy form's fields: README "On-demand groups" (defaults, bounds).
  const POLICY_FIELDS = [
    { key: 'minShards', id: 'as-min', label: 'Min shards', int: true, required: true, check: (v) => v >= 1 || 'at least 1' },
    { key: 'maxShards', id: 'as-max', label: 'Max shards', int: true, required: true, check: (v, p) => v >= p.minShards || 'at least min shards' },
    { key: 'targetEntriesPerSecondPerShard', id: 'as-target', label: 'Target entries/s per shard', required: true, check: (v) => v > 0 || 'more than 0' },
    { key: 'maxLagSecondsPerShard', id: 'as-maxlag', label: 'Max lag per shard (s)', placeholder: 'none', check: (v) => v > 0 || 'more than 0' },
    { key: 'evaluationWindowSeconds', id: 'as-window', label: 'Window (s)', int: true, placeholder: '60', check: (v) => v >= 1 || 'at least 1' },
    { key: 'scaleOutCooldownSeconds', id: 'as-out-cooldown', label: 'Scale-out cooldown (s)', int: true, placeholder: '60', check: (v) => v >= 1 || 'at least 1' },
    { key: 'scaleInCooldownSeconds', id: 'as-in-cooldown', label: 'Scale-in cooldown (s)', int: true, placeholder: '300', check: (v) => v >= 1 || 'at least 1' },
    { key: 'maxStepFactor', id: 'as-step', label: 'Max step factor', placeholder: '2', check: (v) => (v > 1 && v <= 16) || 'more than 1, at most 16' },
  ];

  // autoscalingControls: "Set policy…" opens a form (filled from the policy
  // in force, if any); "Turn off…" disables it. set(answer) follows GET
  // .../autoscaling.
  function autoscalingControls(prefix, group, after) {
    const path = `${API}/streams/${enc(prefix)}/groups/${enc(group)}/autoscaling`;
    const slot = statusSlot('autoscaling-status');
    let policy = null;
    const inputs = {};
    for (const f of POLICY_FIELDS) {
      inputs[f.key] = h('input', { id: f.id, type: 'number', step: 'any', min: 0, inputmode: 'decimal', placeholder: f.placeholder || 'required' });
    }
    const enabled = h('input', { type: 'checkbox', id: 'as-enabled', checked: true });
    const dryRun = h('input', { type: 'checkbox', id: 'as-dryrun' });
    const form = h('form', { id: 'autoscaling-form', class: 'write-form policy', hidden: true, autocomplete: 'off', onsubmit: (e) => {
      e.preventDefault();
      ask();
    } },
    POLICY_FIELDS.map((f) => h('label', { class: 'field' }, f.label, inputs[f.key])),
    h('label', { class: 'check' }, enabled, ' Enabled'),
    h('label', { class: 'check' }, dryRun, ' Dry run (recommend only)'),
    h('div', { class: 'form-actions' },
      h('button', { type: 'submit', id: 'as-submit', class: 'primary', text: 'Review…' }),
      h('button', { type: 'button', id: 'as-close', text: 'Close', onclick: () => {
        form.hidden = true;
      } })));
    const edit = h('button', { type: 'button', id: 'as-edit', text: 'Set policy…', onclick: () => open() });
    const off = h('button', { type: 'button', id: 'as-off', class: 'danger', text: 'Turn off…', hidden: true, onclick: () => askOff() });

    function open() {
      const p = policy || {};
      for (const f of POLICY_FIELDS) inputs[f.key].value = p[f.key] == null ? '' : String(p[f.key]);
      enabled.checked = policy ? !!policy.enabled : true;
      dryRun.checked = !!p.dryRun;
      form.hidden = false;
      setStatus(slot, '');
      inputs.minShards.focus();
    }

    function ask() {
      const body = {};
      for (const f of POLICY_FIELDS) {
        const raw = inputs[f.key].value.trim();
        if (raw === '') {
          if (f.required) return setStatus(slot, 'err', `${f.label}: required.`);
          continue;
        }
        const v = Number(raw);
        if (!Number.isFinite(v) || (f.int && !Number.isInteger(v))) return setStatus(slot, 'err', `${f.label}: ${f.int ? 'a whole number' : 'a number'}.`);
        body[f.key] = v;
      }
      for (const f of POLICY_FIELDS) {
        if (!(f.key in body)) continue;
        const ok = f.check(body[f.key], body);
        if (ok !== true) return setStatus(slot, 'err', `${f.label}: ${ok}.`);
      }
      body.enabled = enabled.checked;
      body.dryRun = dryRun.checked;
      const extra = [];
      if (body.maxLagSecondsPerShard != null) extra.push(`max lag ${body.maxLagSecondsPerShard} s`);
      if (body.evaluationWindowSeconds != null) extra.push(`window ${body.evaluationWindowSeconds} s`);
      if (body.scaleOutCooldownSeconds != null) extra.push(`scale-out cooldown ${body.scaleOutCooldownSeconds} s`);
      if (body.scaleInCooldownSeconds != null) extra.push(`scale-in cooldown ${body.scaleInCooldownSeconds} s`);
      if (body.maxStepFactor != null) extra.push(`step ×${body.maxStepFactor}`);
      const mode = !body.enabled ? 'off (kept, not acting)' : body.dryRun ? 'dry run (recommends, does not scale)' : 'on';
      act(slot, {
        title: 'Set the autoscaling policy?', okLabel: 'Set policy',
        text: `set the autoscaling policy of ${prefix}/${group}: ${body.minShards}–${body.maxShards} shards, target ${body.targetEntriesPerSecondPerShard} entries/s per shard${extra.length ? `, ${extra.join(', ')}` : ''}; ${mode}`,
        note: body.enabled && !body.dryRun
          ? 'The coordinator then scales this group by itself (reshardings requested by autoscaler) whenever the load calls for it.'
          : policy ? 'It replaces the policy in force.' : null,
        method: 'PUT', path, body, reason: REASONS.autoscalingSet,
        done: (r) => `Autoscaling policy set by ${r.policy ? r.policy.requestedBy : deps.session().username}.`,
        after: () => {
          form.hidden = true;
          after();
        },
      });
      return undefined;
    }

    function askOff() {
      act(slot, {
        title: 'Turn autoscaling off?', okLabel: 'Turn off', danger: true,
        text: `turn off autoscaling of ${prefix}/${group}: the shard count then changes only when an operator scales it`,
        method: 'DELETE', path, body: {}, reason: REASONS.autoscalingOff,
        done: () => `Autoscaling turned off by ${deps.session().username}.`,
        after: () => {
          form.hidden = true;
          after();
        },
      });
    }

    function set(a) {
      policy = a && !a.error && a.policy ? a.policy : null;
      edit.textContent = policy ? 'Change policy…' : 'Set policy…';
      off.hidden = !(policy && policy.enabled);
    }

    const el = h('div', { class: 'autoscaling-write write' },
      h('div', { class: 'write-buttons' }, edit, off), form, slot);
    return { el, set };
  }

  return {
    mayWrite, mayWriteSomewhere, writesAtAll, covers,
    createPanel, streamScale, groupScale, rollbackButton, autoscalingControls, statusSlot,
    abandon, busy, isOpen,
  };
};
