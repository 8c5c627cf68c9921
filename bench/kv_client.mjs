// SPDX-License-Identifier: MIT
// KV cache benchmark client (bench/kv_cache.sh): the workloads, each printing one JSON line.
// Throws (exit 1) if a request fails or a count is short. Text is seeded pseudo-random words, so
// two runs with the same arguments send the same bytes (one token per byte on the synthetic
// models' byte-level vocabulary).
// Usage: VERITY_URL=... node kv_client.mjs MODE ARGS...
//   agent SESSIONS TURNS GEN [FIRST=0]: agentic sessions, round-robin (turn 1 of every session,
//       then turn 2 of every session...), one request in flight at a time, streaming
//       /v1/chat/completions with tool definitions; every turn resends the whole history (system
//       prompt, user message, then per turn one assistant tool call and its tool result). Sessions
//       FIRST..FIRST+SESSIONS-1 of one fixed set, so a run with fewer sessions sends a subset of the
//       same requests. Reports per turn every session's time to first token (first streamed
//       delta), prompt and cached tokens. Tools offered AGENT_TOOLS [2] (0: none offered, the
//       history still holds tool calls), the system prompt's filler AGENT_SYSTEM [200] and each
//       tool result AGENT_RESULT [120] characters (at these defaults turn 8 is about 3,700
//       tokens on a byte-level vocabulary: the 4,096-token context of the synthetic models).
//       AGENT_ONLY_TURNS=1,4,8: only those turns are sent (the history of the others is still
//       built): enough against a server without a cache, where no turn depends on the last.
//   shared N SHARED_CHARS GEN: N /v1/completions requests submitted at once, one SHARED_CHARS
//       system prompt then a distinct short user part each, GEN tokens each (ignore_eos).
//   distinct N CHARS GEN SEED: N requests at once, distinct random prompts of CHARS characters.
//   fill N CHARS SEED: N distinct prompts one after another, 1 token each (fills the tiers).
// The three last report wall seconds, prompt, cached and generated tokens.
import http from 'node:http';
const httpAgent = new http.Agent({ keepAlive: true });
const [mode, ...args] = process.argv.slice(2);
const base = process.env.VERITY_URL;

// xorshift32: the same text for the same seed on every run
function rng(seed) {
  let x = (seed * 2654435761) >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 4294967296; };
}
const WORDS = ('the file path read write list search open close error value result line row column table ' +
  'index query build test check config server client request response token cache block disk memory ' +
  'thread queue batch model layer weight input output status code json field name size count total').split(' ');
function words(r, nchars) {
  let s = '';
  while (s.length < nchars) s += (s ? ' ' : '') + WORDS[Math.floor(r() * WORDS.length)];
  return s.slice(0, nchars);
}

// POST through node:http rather than fetch: fetch (undici) gives up on a response whose headers
// take over 300 s, which a loaded machine reaches when 32 streams wait for their first token.
// Resolves to the response (an async iterable of its body's chunks) once its status is 2xx.
function post(path, body) {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, {
      method: 'POST', agent: httpAgent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      if (res.statusCode >= 200 && res.statusCode < 300) return resolve(res);
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { t += c; });
      res.on('end', () => reject(new Error(`${path}: HTTP ${res.statusCode}: ${t.slice(0, 300)}`)));
    });
    req.on('error', reject);
    req.end(data);
  });
}

// Streams a request; returns { ttft_ms, usage }: ttft at the first chunk that carries generated
// text or a tool call (or, if none does, the usage chunk).
async function stream(path, body) {
  const t0 = performance.now();
  const res = await post(path, { ...body, stream: true, stream_options: { include_usage: true } });
  const dec = new TextDecoder();
  let buf = '', ttft = 0, usage = null;
  for await (const chunk of res) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const d = JSON.parse(ev.slice(6));
      if (d.error) throw new Error(`${path}: ${JSON.stringify(d.error).slice(0, 300)}`);
      const c = d.choices && d.choices[0];
      if (c && c.error) throw new Error(`${path}: ${JSON.stringify(c.error).slice(0, 300)}`); // a streamed request's own failure
      const got = c && (c.text || (c.delta && (c.delta.content || c.delta.tool_calls || c.delta.reasoning_content)));
      if (got && !ttft) ttft = performance.now() - t0;
      if (d.usage) { usage = d.usage; if (!ttft) ttft = performance.now() - t0; }
    }
  }
  if (!usage) throw new Error(`${path}: no usage chunk`);
  return { ttft_ms: ttft, usage };
}
const cached = (u) => (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;

function agentTools(n) {
  const names = ['read_file', 'list_dir', 'search_code', 'run_tests', 'write_file', 'http_get', 'query_db', 'git_log'];
  const r = rng(7);
  return Array.from({ length: n }, (_, i) => ({
    type: 'function',
    function: {
      name: names[i % names.length] + (i >= names.length ? `_${i}` : ''),
      description: words(r, 160),
      parameters: {
        type: 'object',
        properties: { path: { type: 'string', description: words(r, 60) }, limit: { type: 'integer', description: words(r, 40) } },
        required: ['path'],
      },
    },
  }));
}

async function agent(S, T, G, first = 0) {
  const tools = agentTools(+(process.env.AGENT_TOOLS ?? 2));
  const toolNames = tools.length ? tools.map((x) => x.function.name) : ['read_file', 'list_dir'];
  const resultChars = +(process.env.AGENT_RESULT ?? 120);
  const system = 'You are a coding agent working in a repository. Call one tool at a time, read its result, ' +
    'then decide the next step. ' + words(rng(11), +(process.env.AGENT_SYSTEM ?? 200));
  const sess = Array.from({ length: S }, (_, i) => {
    const r = rng(1000 + first + i);
    return { r, msgs: [{ role: 'system', content: system }, { role: 'user', content: `Task ${first + i}: ` + words(r, 200) }] };
  });
  const only = process.env.AGENT_ONLY_TURNS ? process.env.AGENT_ONLY_TURNS.split(',').map(Number) : null;
  const turns = [];
  for (let t = 1; t <= T; t++) {
    const row = { turn: t, ttft_ms: [], prompt_tokens: [], cached_tokens: [] };
    for (const [i, s] of sess.entries()) {
      if (t > 1) { // the previous turn's tool call and its result join the history
        const tool = toolNames[Math.floor(s.r() * toolNames.length)];
        const id = `call_${first + i}_${t - 1}`;
        s.msgs.push({ role: 'assistant', content: '', tool_calls: [{ id, type: 'function', function: { name: tool, arguments: JSON.stringify({ path: 'src/' + words(s.r, 24).replace(/ /g, '/') + '.c', limit: 40 }) } }] });
        s.msgs.push({ role: 'tool', tool_call_id: id, content: words(s.r, resultChars) });
      }
      if (only && !only.includes(t)) continue;
      const { ttft_ms, usage } = await stream('/v1/chat/completions', { messages: s.msgs, ...(tools.length ? { tools } : {}), max_tokens: G, ignore_eos: true, temperature: 0 });
      row.ttft_ms.push(+ttft_ms.toFixed(1));
      row.prompt_tokens.push(usage.prompt_tokens);
      row.cached_tokens.push(cached(usage));
    }
    turns.push(row);
  }
  return { sessions: S, turns_per_session: T, gen: G, turns };
}

async function batch(prompts, G) {
  const t0 = performance.now();
  const rs = await Promise.all(prompts.map((prompt, i) =>
    stream('/v1/completions', { prompt, max_tokens: G, ignore_eos: true, temperature: 0.8, seed: i })));
  const seconds = (performance.now() - t0) / 1000;
  const sum = (f) => rs.reduce((a, x) => a + f(x.usage), 0);
  const gen = sum((u) => u.completion_tokens);
  if (gen !== prompts.length * G) throw new Error(`generated ${gen} tokens, expected ${prompts.length * G}`);
  const ttft = rs.map((x) => x.ttft_ms).sort((a, b) => a - b);
  return { requests: prompts.length, seconds: +seconds.toFixed(3), prompt_tokens: sum((u) => u.prompt_tokens),
           cached_tokens: sum(cached), gen_tokens: gen, ttft_p50_ms: +ttft[ttft.length >> 1].toFixed(1) };
}

let out;
if (mode === 'agent') {
  out = await agent(+args[0], +args[1], +args[2], +(args[3] || 0));
} else if (mode === 'shared') {
  const [N, C, G] = args.map(Number);
  const sys = 'System: ' + words(rng(5), C - 8);
  out = await batch(Array.from({ length: N }, (_, i) => `${sys}\nUser ${i}: ` + words(rng(100 + i), 40) + '\nAssistant:'), G);
} else if (mode === 'distinct') {
  const [N, C, G, seed] = args.map(Number);
  // a distinct first word keeps even the first block of every prompt apart
  out = await batch(Array.from({ length: N }, (_, i) => `${seed}.${i} ` + words(rng(seed * 1000 + i), C)), G);
} else if (mode === 'fill') {
  const [N, C, seed] = args.map(Number);
  const t0 = performance.now();
  let p = 0, c = 0;
  for (let i = 0; i < N; i++) {
    const { usage } = await stream('/v1/completions', { prompt: `${seed}.${i} ` + words(rng(seed * 1000 + i), C), max_tokens: 1, temperature: 0 });
    p += usage.prompt_tokens; c += cached(usage);
  }
  out = { requests: N, seconds: +((performance.now() - t0) / 1000).toFixed(3), prompt_tokens: p, cached_tokens: c };
} else {
  throw new Error(`unknown mode ${mode}`);
}
console.log(JSON.stringify(out));
