// SPDX-License-Identifier: MIT
// Served names through the official OpenAI client (openai@6), against a server started with
// --served-model-name a,b --chat-template chatml (tests/cli/serve_names.sh): models.list() gives
// both names, completions and chat answer to either and report the first, and an unknown name is
// the client's NotFoundError (404, code model_not_found).
// Usage: VERITY_URL=http://127.0.0.1:PORT node names.mjs
// Prints one PASS or FAIL line per check; any uncaught error is one FAIL line and exit 1.
import { guard } from './guard.mjs';
const die = guard('serve_names.node');
const base = process.env.VERITY_URL;
if (!base) die(new Error('VERITY_URL is not set'));
const OpenAI = (await import('openai')).default;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
let failed = false;
const check = (name, ok, why) => {
  console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`);
  if (!ok) failed = true;
};

const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
check('serve_names.node_models_list', ids.join(',') === 'a,b', `ids ${JSON.stringify(ids)}`);

const c = await client.completions.create({ model: 'b', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
check('serve_names.node_completion_alias', c.model === 'a' && c.choices[0].text.length > 0, JSON.stringify(c).slice(0, 300));

const ch = await client.chat.completions.create({ model: 'a', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 });
check('serve_names.node_chat', ch.model === 'a' && ch.usage.completion_tokens > 0, JSON.stringify(ch).slice(0, 300));

let err = null;
try {
  await client.completions.create({ model: 'c', prompt: 'x', max_tokens: 1 });
} catch (e) {
  err = e;
}
check('serve_names.node_unknown_404', err instanceof OpenAI.NotFoundError && err.code === 'model_not_found',
  err ? `${err.constructor.name} ${err.status} ${err.code}` : 'the request succeeded');
process.exit(failed ? 1 : 0);
