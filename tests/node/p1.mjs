// SPDX-License-Identifier: MIT
// P1 through HTTP. 64 distinct requests (completions and chat, greedy and seeded sampling,
// stop strings, n > 1, logprobs). Mode "record": each is sent alone, non-streamed, one after the
// other. Mode "replay": all 64 at once, every other one streamed (the stream is assembled). Each
// response is normalized (id and created removed; a stream assembled into the non-streamed
// shape) and printed as one JSON line, so the caller can compare the two runs byte for byte.
// With VERITY_P1_HOLD=1 (a server started with --admin-api 1) replay holds the engine
// (POST /admin/pause) and sends the 64 requests into its queue one at a time, in index order, then
// releases it once every choice waits, so they really are scheduled together, in the same order,
// whatever the machine's speed; the caller checks the batch size histogram to prove it.
// With VERITY_P1_WORKLOAD=cache the 64 requests share prefixes instead (system prompts,
// multi-turn histories, long shared completions prompts): the KV cache's P1 workload.
// With VERITY_P1_WORKLOAD=spec the 64 requests hold text to copy (a passage, then its beginning
// again) and mix greedy and seeded sampling at temperature 0.7 and 1.0 with tool calls and
// json_schema response formats (grammars), stop strings, n > 1 and logprobs: speculative
// decoding's P1 workload.
// Usage: VERITY_URL=http://127.0.0.1:PORT node p1.mjs record|replay > out.jsonl
const base = process.env.VERITY_URL;
const mode = process.argv[2];
const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'Zürich', '東京', '🙂', 'while', 'it', 'rained', 'and', 'then'];
let st = 12345;
const rnd = (n) => { st = (st * 1103515245 + 12345) % 2147483648; return st % n; };
const text = (n) => Array.from({ length: n }, () => words[rnd(words.length)]).join(' ');

const reqs = [];
if (process.env.VERITY_P1_WORKLOAD === 'cache') {
  // 64 requests that share prefixes, as agents' do: 16 conversations over 4 system prompts (about
  // 60 words each), three turns each (a turn's history is the previous turns' messages, the
  // assistant's replies fixed text), and 16 completions that extend 4 long shared prompts
  const systems = Array.from({ length: 4 }, () => text(50 + rnd(20)));
  for (let c = 0; c < 16; c++) {
    const messages = [{ role: 'system', content: systems[c % 4] }];
    for (let turn = 0; turn < 3; turn++) {
      messages.push({ role: 'user', content: text(6 + rnd(12)) });
      const body = { messages: messages.map((m) => ({ ...m })), max_tokens: 6 + rnd(10), seed: c * 3 + turn,
        temperature: (c + turn) % 3 === 0 ? 0 : 0.8 };
      if (c % 5 === 2) { body.logprobs = true; body.top_logprobs = 2; }
      reqs.push({ path: '/v1/chat/completions', body, chat: true });
      messages.push({ role: 'assistant', content: text(4 + rnd(8)) });
    }
  }
  const stems = Array.from({ length: 4 }, () => text(80 + rnd(30)));
  for (let k = 0; k < 16; k++) {
    const body = { prompt: stems[k % 4] + ' ' + text(1 + rnd(20)), max_tokens: 6 + rnd(10), seed: 100 + k,
      temperature: k % 2 ? 0.9 : 0 };
    if (k % 6 === 1) body.n = 2;
    reqs.push({ path: '/v1/completions', body, chat: false });
  }
} else if (process.env.VERITY_P1_WORKLOAD === 'spec') {
  const passages = Array.from({ length: 8 }, () => text(25 + rnd(25)));
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 40 },
      unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city'] } } },
  { type: 'function', function: { name: 'search', parameters: { type: 'object',
    properties: { query: { type: 'string', minLength: 1 }, limit: { type: 'integer', minimum: 1, maximum: 50 } },
    required: ['query'] } } }];
  const schema = { type: 'json_schema', json_schema: { name: 'w', strict: true, schema: { type: 'object',
    properties: { temp: { type: 'number', minimum: -50, maximum: 50 }, sky: { enum: ['clear', 'cloudy', 'rain'] },
      note: { type: ['string', 'null'], maxLength: 20 } }, required: ['temp', 'sky', 'note'], additionalProperties: false } } };
  const temps = [0, 0.7, 1.0];
  for (let i = 0; i < 64; i++) {
    const chat = i % 2 === 0;
    const p = passages[i % 8];
    const cps = Array.from(p); // cut at a code point, never inside a surrogate pair
    const again = cps.slice(0, 10 + rnd(cps.length - 10)).join('');
    const body = { max_tokens: 12 + rnd(52), seed: i, temperature: temps[i % 3] };
    if (i % 7 === 3) body.stop = ['e ', 'the'];
    if (i % 11 === 5) body.n = 2;
    if (chat) {
      body.messages = [{ role: 'user', content: `${p}\nSay it again: ${again}` }];
      if (i % 8 === 0) { body.tools = tools; body.tool_choice = 'required'; body.max_tokens += 100; }
      else if (i % 8 === 4) { body.response_format = schema; body.max_tokens += 100; }
      else if (i % 8 === 6) { body.tools = tools; body.tool_choice = 'auto'; }
      if (i % 3 === 1) { body.logprobs = true; body.top_logprobs = 2; }
    } else {
      body.prompt = `${p} ${p} ${again}`;
      if (i % 3 === 1) body.logprobs = 2;
    }
    reqs.push({ path: chat ? '/v1/chat/completions' : '/v1/completions', body, chat });
  }
} else {
  for (let i = 0; i < 64; i++) {
    const chat = i % 2 === 0;
    const body = { max_tokens: 4 + rnd(24), seed: i, temperature: i % 3 === 0 ? 0 : 0.9 };
    if (i % 5 === 0) body.top_k = 7;
    if (i % 7 === 0) body.stop = ['e', 'th'];
    if (i % 11 === 0) body.n = 2;
    if (chat) {
      body.messages = [{ role: 'user', content: text(1 + rnd(40)) }];
      if (i % 4 === 0) body.messages.unshift({ role: 'system', content: text(5) });
      if (i % 3 === 1) { body.logprobs = true; body.top_logprobs = 2; }
    } else {
      body.prompt = text(1 + rnd(60));
      if (i % 3 === 1) body.logprobs = 2;
    }
    reqs.push({ path: chat ? '/v1/chat/completions' : '/v1/completions', body, chat });
  }
}

function normUsage(u) {
  if (!u) return u;
  const { prompt_tokens_details, ...rest } = u;
  return rest;
}

function normChoice(c, chat) {
  const o = { index: c.index, finish_reason: c.finish_reason };
  if (chat) {
    o.content = c.message.content ?? '';
    o.tool_calls = (c.message.tool_calls || []).map((t) => [t.id, t.function.name, t.function.arguments]);
    o.logprobs = c.logprobs ? c.logprobs.content : null;
  } else {
    o.text = c.text;
    o.logprobs = c.logprobs;
  }
  return o;
}

async function send(r, stream) {
  const body = { ...r.body };
  if (stream) { body.stream = true; body.stream_options = { include_usage: true }; }
  const res = await fetch(base + r.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!stream) {
    const j = await res.json();
    if (!res.ok) return { error: j };
    return { usage: normUsage(j.usage), choices: j.choices.map((c) => normChoice(c, r.chat)) };
  }
  // assemble an SSE stream (completions that ask for logprobs are never streamed here, so the
  // assembled shape has logprobs only for chat); chunk boundaries are arbitrary: parse by line
  const raw = await res.text();
  const choices = new Map();
  let usage = null;
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const ch = JSON.parse(line.slice(6));
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (!choices.has(c.index)) choices.set(c.index, { index: c.index, content: '', text: '', tool_calls: [], lp: [], finish_reason: null });
      const a = choices.get(c.index);
      if (r.chat) {
        if (c.delta.content) a.content += c.delta.content;
        for (const t of c.delta.tool_calls || []) a.tool_calls.push([t.id, t.function.name, t.function.arguments]);
        if (c.logprobs && c.logprobs.content) a.lp.push(...c.logprobs.content);
      } else if (c.text) a.text += c.text;
      if (c.finish_reason) a.finish_reason = c.finish_reason;
    }
  }
  const out = [...choices.values()].sort((x, y) => x.index - y.index).map((a) => {
    const o = { index: a.index, finish_reason: a.finish_reason };
    if (r.chat) { o.content = a.content; o.tool_calls = a.tool_calls; o.logprobs = r.body.logprobs ? a.lp : null; }
    else { o.text = a.text; o.logprobs = null; }
    return o;
  });
  return { usage: normUsage(usage), choices: out };
}

const results = new Array(reqs.length);
if (mode === 'record') {
  for (let i = 0; i < reqs.length; i++) results[i] = await send(reqs[i], false);
} else {
  const hold = process.env.VERITY_P1_HOLD === '1';
  const admin = async (what) => {
    const res = await fetch(base + '/admin/' + what, { method: 'POST' });
    if (!res.ok) throw new Error(`POST /admin/${what}: HTTP ${res.status} ${await res.text()}`);
  };
  if (hold) await admin('pause');
  const waitingNow = async () => {
    const m = await (await fetch(base + '/metrics')).text();
    return Number((m.match(/^verity_requests_waiting (\d+)$/m) || [])[1]);
  };
  // every choice is one engine request. Held, the requests enter the queue one at a time, in
  // index order (the next is sent once the previous one's choices wait), so the order the
  // scheduler admits them in, and with it the whole schedule, is the same on every run and
  // machine; each wait has a backstop of 300 s for a hung server and ends as soon as the state
  // exists.
  const pending = [];
  let want = 0;
  for (let i = 0; i < reqs.length; i++) {
    const r = reqs[i];
    pending.push(send(r, i % 2 === 1 && !(r.body.logprobs && !r.chat)).then((x) => { results[i] = x; }));
    if (!hold) continue;
    want += r.body.n || 1;
    let waiting = -1;
    for (let k = 0; k < 3000 && waiting !== want; k++) {
      waiting = await waitingNow();
      if (waiting !== want) await new Promise((ok) => setTimeout(ok, 5));
    }
    if (waiting !== want) {
      await admin('resume');
      throw new Error(`request ${i}: ${waiting} choices wait in the engine's queue, ${want} expected`);
    }
  }
  if (hold) await admin('resume');
  const all = Promise.all(pending);
  await all;
}
for (let i = 0; i < reqs.length; i++) {
  const res = results[i];
  console.log(JSON.stringify({ i, ...res }));
}
