// SPDX-License-Identifier: MIT
// Per-request detokenization (the incident's bug class: a detokenizer that applied one request's
// skip_special_tokens to the whole batch). Pairs of requests identical but for
// skip_special_tokens are sent concurrently, so they share engine steps. Each pair must produce the
// same tokens (the flag never changes sampling); the skip=false text must show every special token
// the model produced and the skip=true text must show exactly that many fewer. The test is not
// vacuous: it fails unless special tokens were produced at all.
// Usage: VERITY_URL=http://127.0.0.1:PORT node detok.mjs
const base = process.env.VERITY_URL;
const specials = ['<s>', '</s>', '<unk>'];
const count = (text, s) => text.split(s).length - 1;

async function chat(seed, skip) {
  const body = {
    messages: [{ role: 'user', content: 'tell me' }], max_tokens: 400, temperature: 1.8, seed,
    ignore_eos: true, logprobs: true, skip_special_tokens: skip,
  };
  const r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(JSON.stringify(j));
  return { text: j.choices[0].message.content, tokens: j.choices[0].logprobs.content.map((e) => e.token) };
}

const seeds = Array.from({ length: 12 }, (_, i) => 100 + i);
const res = await Promise.all(seeds.flatMap((s) => [chat(s, true), chat(s, false)]));
let produced = 0, bad = [];
for (let i = 0; i < seeds.length; i++) {
  const skip = res[2 * i], keep = res[2 * i + 1];
  if (JSON.stringify(skip.tokens) !== JSON.stringify(keep.tokens)) { bad.push(`seed ${seeds[i]}: tokens differ`); continue; }
  for (const sp of specials) {
    const n = keep.tokens.filter((t) => t === sp).length;
    produced += n;
    if (count(keep.text, sp) - count(skip.text, sp) !== n)
      bad.push(`seed ${seeds[i]}: ${sp}: ${n} produced, shown ${count(keep.text, sp)} with skip=false and ${count(skip.text, sp)} with skip=true`);
  }
}
if (produced === 0) console.log('FAIL serve.detok_per_request: no special token was produced; the test would be vacuous');
else if (bad.length) console.log(`FAIL serve.detok_per_request: ${bad.slice(0, 3).join('; ')}`);
else console.log(`PASS serve.detok_per_request(${seeds.length} pairs, ${produced} special tokens)`);
