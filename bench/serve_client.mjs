// SPDX-License-Identifier: MIT
// Serving benchmark client: C concurrent streaming completion clients, each sending R requests
// in a row: 10-token prompts ("Story N:" with BOS on the synthetic byte-level vocabulary), so the
// run is decode as `verity bench --prompt 10` measures it, and G generated tokens (ignore_eos, so
// every request runs to G). Reports generated tokens (from each stream's usage chunk) per second
// over the whole run, and client-side percentiles of time to first token, inter-token latency and
// each request's whole time (e2e), as one JSON line. Throws (exit 1) if a request fails or a count
// is short.
// Usage: VERITY_URL=... [STAGGER_MS=0] node serve_client.mjs CONCURRENCY REQUESTS_PER_CLIENT GEN
const [C, R, G] = process.argv.slice(2).map(Number);
const url = process.env.VERITY_URL + '/v1/completions';
const ttft = [], itl = [], e2e = [];
let tokens = 0;

async function one(i) {
  const t0 = performance.now();
  const res = await fetch(url, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: `Story ${i % 10}:`, max_tokens: G, ignore_eos: true, temperature: 0.8, seed: i, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`request ${i}: HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '', last = 0;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const d = JSON.parse(ev.slice(6));
      if (d.usage) tokens += d.usage.completion_tokens;
      const c = d.choices[0];
      if (c && c.text) {
        const now = performance.now();
        if (!last) ttft.push(now - t0); else itl.push(now - last);
        last = now;
      }
    }
  }
  e2e.push(performance.now() - t0);
}

// STAGGER_MS (default 0): client c starts c * STAGGER_MS / C ms after the first, so with streams of
// equal length the requests arrive spread over STAGGER_MS rather than as one burst of C
const stagger = Number(process.env.STAGGER_MS || 0);
async function client(c) {
  if (stagger > 0) await new Promise((ok) => setTimeout(ok, (c * stagger) / C));
  for (let r = 0; r < R; r++) await one(c * R + r);
}
const t0 = performance.now();
await Promise.all(Array.from({ length: C }, (_, c) => client(c)));
const secs = (performance.now() - t0) / 1000;
if (tokens !== C * R * G) throw new Error(`generated ${tokens} tokens, expected ${C * R * G}`);
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : 0; };
console.log(JSON.stringify({
  concurrency: C, requests: C * R, gen: G, seconds: +secs.toFixed(3), tok_s: +(tokens / secs).toFixed(2),
  ttft_ms: { p50: +pct(ttft, 0.5).toFixed(1), p90: +pct(ttft, 0.9).toFixed(1), p99: +pct(ttft, 0.99).toFixed(1) },
  itl_ms: { p50: +pct(itl, 0.5).toFixed(1), p90: +pct(itl, 0.9).toFixed(1), p99: +pct(itl, 0.99).toFixed(1) },
  e2e_ms: { p50: +pct(e2e, 0.5).toFixed(1), p90: +pct(e2e, 0.9).toFixed(1), p99: +pct(e2e, 0.99).toFixed(1) },
}));
