// SPDX-License-Identifier: MIT
// Conformance of `verity serve` with the official OpenAI client (openai@6): completions, chat,
// streaming (chunk sequence, same id, role first, usage chunk), logprobs, usage, tools with
// tool_choice "required" through the client's stream helper, and error mapping.
// Usage: VERITY_URL=http://127.0.0.1:PORT node conformance.mjs   (prints PASS/FAIL lines)
// Whatever goes wrong outside a case (no server, a bad /v1/models, an uncaught error or rejection)
// prints "FAIL node.conformance: why" and exits 1, so no case vanishes silently.
import { brief, guard } from './guard.mjs';
const die = guard('node.conformance');

const base = process.env.VERITY_URL;
if (!base) die(new Error('VERITY_URL is not set'));
// imported here, after the handlers, so that a missing package or a signal during the import
// also ends in a FAIL line
let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  die(e);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.VERITY_KEY || 'none', maxRetries: 0, timeout: 60000 });
let model;
try {
  const models = await client.models.list();
  model = models.data[0].id;
  if (typeof model !== 'string' || !model) throw new Error(`no model id in /v1/models: ${JSON.stringify(models.data)}`);
} catch (e) {
  die(e);
}
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`PASS node.${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL node.${name}: ${brief(e)}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city', 'unit'] },
  },
}, {
  type: 'function',
  function: { name: 'list_dir', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
}];

await check('completions', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert(r.object === 'text_completion', 'object');
  assert(typeof r.choices[0].text === 'string', 'text');
  assert(['stop', 'length'].includes(r.choices[0].finish_reason), 'finish_reason ' + r.choices[0].finish_reason);
  assert(r.usage.prompt_tokens > 0 && r.usage.completion_tokens <= 8, 'usage');
  assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'total_tokens');
  assert(typeof r.system_fingerprint === 'string', 'system_fingerprint');
});

await check('completions_logprobs', async () => {
  const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert(lp.tokens.length === r.usage.completion_tokens, 'one entry per token');
  assert(lp.token_logprobs.every((x) => x <= 0), 'logprobs <= 0');
  assert(lp.top_logprobs.every((t) => Object.keys(t).length <= 3), 'top_logprobs count');
  assert(lp.text_offset.length === lp.tokens.length, 'text_offset');
});

await check('chat', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }], max_tokens: 6, seed: 3 });
  assert(r.object === 'chat.completion', 'object');
  assert(r.choices[0].message.role === 'assistant', 'role');
  assert(typeof r.choices[0].message.content === 'string', 'content');
  assert(r.usage.completion_tokens <= 6, 'usage');
});

await check('chat_content_parts_and_n', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: 'there' }] }], max_tokens: 4, n: 3, seed: 1 });
  assert(r.choices.length === 3, 'three choices');
  assert(r.choices.map((c) => c.index).join() === '0,1,2', 'indices');
});

await check('chat_logprobs', async () => {
  // greedy and ignore_eos: exactly 5 tokens, each the most likely one, so each entry's token is
  // the first of its top_logprobs (the list is sorted, most likely first) with the same logprob
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const lp = r.choices[0].logprobs.content;
  assert(r.usage.completion_tokens === 5 && lp.length === 5, `one entry per token: ${lp.length} entries, ${r.usage.completion_tokens} tokens, expected 5`);
  lp.forEach((e, i) => {
    const at = `entry ${i} (${JSON.stringify(e)})`;
    assert(typeof e.token === 'string' && Number.isFinite(e.logprob) && e.logprob <= 0, `${at}: token and a finite logprob <= 0`);
    assert(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b <= 255), `${at}: bytes`);
    if (!e.token.includes('\uFFFD'))
      assert(Buffer.from(e.bytes).equals(Buffer.from(e.token, 'utf8')), `${at}: bytes are not the token's UTF-8`);
    const top = e.top_logprobs;
    assert(Array.isArray(top) && top.length === 2, `${at}: top_logprobs has ${top && top.length} entries, expected 2`);
    for (const t of top)
      assert(typeof t.token === 'string' && Number.isFinite(t.logprob) && t.logprob <= 0 && Array.isArray(t.bytes), `${at}: top entry ${JSON.stringify(t)}`);
    for (let k = 1; k < top.length; k++)
      assert(top[k - 1].logprob >= top[k].logprob, `${at}: top_logprobs not sorted descending`);
    assert(top[0].token !== top[1].token || JSON.stringify(top[0].bytes) !== JSON.stringify(top[1].bytes), `${at}: the same token twice in top_logprobs`);
    assert(top.reduce((a, t) => a + Math.exp(t.logprob), 0) <= 1 + 1e-5, `${at}: top probabilities sum above 1`);
    const same = top.find((t) => t.token === e.token && JSON.stringify(t.bytes) === JSON.stringify(e.bytes));
    assert(same, `${at}: the greedy token is not among top_logprobs`);
    assert(same.logprob === e.logprob, `${at}: logprob ${e.logprob} differs from its top_logprobs entry ${same.logprob}`);
    assert(e.logprob === top[0].logprob, `${at}: greedy token's logprob ${e.logprob} is not the largest ${top[0].logprob}`);
  });
  const text = Buffer.concat(lp.map((e) => Buffer.from(e.bytes))).toString('utf8');
  assert(text === r.choices[0].message.content, `content ${JSON.stringify(r.choices[0].message.content)} differs from its tokens' bytes ${JSON.stringify(text)}`);
});

await check('chat_stream', async () => {
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Count' }], max_tokens: 6, stream: true, stream_options: { include_usage: true }, temperature: 0 });
  const ids = new Set(); const created = new Set();
  let first = true, text = '', finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    ids.add(chunk.id); created.add(chunk.created); n++;
    if (chunk.choices.length === 0) { usage = chunk.usage; continue; }
    const d = chunk.choices[0].delta;
    if (first) { assert(d.role === 'assistant', 'role first'); first = false; }
    if (d.content) text += d.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert(ids.size === 1 && created.size === 1, 'same id and created in every chunk');
  assert(finish === 'length' || finish === 'stop', 'finish ' + finish);
  assert(usage && usage.completion_tokens <= 6, 'usage chunk with choices: []');
  const again = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Count' }], max_tokens: 6, temperature: 0 });
  assert(again.choices[0].message.content === text, 'streamed text equals non-streamed text');
});

await check('completions_stream_stop', async () => {
  // seeded sampling (deterministic) with ignore_eos: always 24 tokens of varied text. The stop
  // string is the first ASCII letter or digit that did not occur before it, so its first
  // occurrence is where the text is cut, and the cut keeps a non-empty prefix.
  const params = { model, prompt: 'abc', max_tokens: 24, temperature: 1, seed: 11, ignore_eos: true };
  const full = await client.completions.create(params);
  const t = full.choices[0].text;
  assert(full.usage.completion_tokens === 24 && full.choices[0].finish_reason === 'length', `24 tokens and finish length, got ${full.usage.completion_tokens}, ${full.choices[0].finish_reason}`);
  let at = -1;
  for (let i = 1; i < t.length && at < 0; i++)
    if (/[A-Za-z0-9]/.test(t[i]) && !t.slice(0, i).includes(t[i])) at = i;
  assert(at > 0, `no usable stop character in ${JSON.stringify(t)} (needs an ASCII letter or digit after the first character that did not occur before it)`);
  const stop = t[at];
  const r = await client.completions.create({ ...params, stop: [stop] });
  assert(r.choices[0].text === t.slice(0, at), `cut before the stop string ${JSON.stringify(stop)}, which is not returned: got ${JSON.stringify(r.choices[0].text)}, expected ${JSON.stringify(t.slice(0, at))}`);
  assert(r.choices[0].finish_reason === 'stop', 'finish stop, got ' + r.choices[0].finish_reason);
  let s = '';
  for await (const c of await client.completions.create({ ...params, stop, stream: true }))
    s += c.choices[0]?.text || '';
  assert(s === r.choices[0].text, `streamed stop cut ${JSON.stringify(s)} equals non-streamed ${JSON.stringify(r.choices[0].text)}`);
});

await check('tools_required_stream_helper', async () => {
  const runner = client.chat.completions.stream({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'required', max_tokens: 400 });
  const final = await runner.finalChatCompletion();
  const ch = final.choices[0];
  assert(ch.finish_reason === 'tool_calls', 'finish_reason ' + ch.finish_reason);
  const calls = ch.message.tool_calls;
  assert(calls && calls.length >= 1, 'a tool call');
  for (const c of calls) {
    assert(['get_weather', 'list_dir'].includes(c.function.name), 'known tool ' + c.function.name);
    const args = JSON.parse(c.function.arguments);
    const schema = tools.find((t) => t.function.name === c.function.name).function.parameters;
    for (const k of schema.required) assert(k in args, 'required argument ' + k);
    assert(typeof c.id === 'string' && c.id.length > 0 && c.type === 'function', 'id/type');
  }
  assert(!(ch.message.content || '').includes('<tool_call>'), 'no markup in content');
});

await check('tools_named', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'ls' }], tools, tool_choice: { type: 'function', function: { name: 'list_dir' } }, max_tokens: 400 });
  const c = r.choices[0].message.tool_calls;
  assert(c && c.length === 1 && c[0].function.name === 'list_dir', 'named call');
  assert(typeof JSON.parse(c[0].function.arguments).path === 'string', 'path argument');
});

await check('errors', async () => {
  let status = 0;
  try { await client.chat.completions.create({ model, messages: 'nope' }); } catch (e) { status = e.status; assert(e.error && e.error.param === 'messages', 'param names the field'); }
  assert(status === 400, 'status 400, got ' + status);
  status = 0;
  try { await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }); } catch (e) { status = e.status; }
  assert(status === 404, 'unknown model 404, got ' + status);
  status = 0;
  try { await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], tools, tool_choice: 'sometimes' }); } catch (e) { status = e.status; }
  assert(status === 400, 'bad tool_choice 400, got ' + status);
});

process.exit(failed ? 1 : 0);
