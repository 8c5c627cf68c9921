// SPDX-License-Identifier: MIT
// Per-request detokenization (the incident's bug class: a detokenizer that applied one request's
// skip_special_tokens to the whole batch). Pairs of requests identical but for
// skip_special_tokens are sent concurrently, so they share engine steps. Each pair must produce the
// same tokens (the flag never changes sampling); the skip=false text must show every special token
// the model produced and the skip=true text must show exactly that many fewer. The test is not
// vacuous: it fails unless special tokens were produced at all.
// Usage: VERITY_URL=http://127.0.0.1:PORT node detok.mjs
// Prints exactly one line, PASS or FAIL serve.detok_per_request, whatever goes wrong (a failed
// request, no server, an uncaught error), and exits 1 with FAIL. A failed request is reported as
// such ("request failed"), never as a detokenization difference.
import { guard } from './guard.mjs';
const name = 'serve.detok_per_request';
const die = guard(name);
const base = process.env.VERITY_URL;
if (!base) die(new Error('VERITY_URL is not set'));
const specials = ['<s>', '</s>', '<unk>'];
const count = (text, s) => text.split(s).length - 1;

async function chat(seed, skip) {
  const body = {
    messages: [{ role: 'user', content: 'tell me' }], max_tokens: 400, temperature: 1.8, seed,
    ignore_eos: true, logprobs: true, skip_special_tokens: skip,
  };
  const r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const raw = await r.text();
  if (!r.ok) throw new Error(`status ${r.status}: ${raw.slice(0, 300)}`);
  const j = JSON.parse(raw);
  return { text: j.choices[0].message.content, tokens: j.choices[0].logprobs.content.map((e) => e.token) };
}

const seeds = Array.from({ length: 12 }, (_, i) => 100 + i);
try {
  // all 24 requests at once (each pair shares engine steps); every outcome is collected, so one
  // failed request cannot hide the others or end the script without a result line
  const res = await Promise.allSettled(seeds.flatMap((s) => [chat(s, true), chat(s, false)]));
  const failedReqs = res.map((r, i) => r.status === 'rejected' ? `seed ${seeds[i >> 1]} skip=${i % 2 === 0}: ${r.reason && r.reason.message ? r.reason.message : String(r.reason)}` : null).filter(Boolean);
  if (failedReqs.length) {
    console.log(`FAIL ${name}: request failed (${failedReqs.length} of ${res.length}): ${failedReqs.slice(0, 2).join('; ')}`);
    process.exit(1);
  }
  let produced = 0;
  const bad = [];
  for (let i = 0; i < seeds.length; i++) {
    const skip = res[2 * i].value, keep = res[2 * i + 1].value;
    if (JSON.stringify(skip.tokens) !== JSON.stringify(keep.tokens)) { bad.push(`seed ${seeds[i]}: tokens differ`); continue; }
    for (const sp of specials) {
      const n = keep.tokens.filter((t) => t === sp).length;
      produced += n;
      if (count(keep.text, sp) - count(skip.text, sp) !== n)
        bad.push(`seed ${seeds[i]}: ${sp}: ${n} produced, shown ${count(keep.text, sp)} with skip=false and ${count(skip.text, sp)} with skip=true`);
    }
  }
  if (produced === 0) {
    console.log(`FAIL ${name}: no special token was produced; the test would be vacuous`);
    process.exit(1);
  }
  if (bad.length) {
    console.log(`FAIL ${name}: ${bad.slice(0, 3).join('; ')}`);
    process.exit(1);
  }
  console.log(`PASS ${name}(${seeds.length} pairs, ${produced} special tokens)`);
} catch (e) {
  die(e);
}
