// SPDX-License-Identifier: MIT
// `verity chat-template` against the jinja2 renderings committed in tests/data/chat: for every
// shared template that uses neither bos_token nor eos_token (the CLI takes those from the
// vocabulary, the goldens from the template's family), every golden conversation rendered through
// the command must be byte-identical. Usage: VERITY=... SHARED=... node chat_cli.mjs
// Prints exactly one line for chat_template_cli whatever goes wrong (an unreadable data file, an
// uncaught error) and exits 1 with FAIL.
import { guard } from './guard.mjs';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, readdirSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';

const name = 'chat_template_cli';
const die = guard(name);

const here = dirname(fileURLToPath(import.meta.url));
const data = join(here, '..', 'data', 'chat');
const shared = process.env.SHARED || join(here, '..', '..', '..', 'shared');
const vocab = join(shared, 'vocab', 'ggml-vocab-gpt-2.gguf');
if (!existsSync(vocab) || !existsSync(join(shared, 'templates'))) {
  console.log(`SKIP ${name}: ${vocab} or the templates are missing`);
  process.exit(0);
}
let compared = 0, dir = null;
const bad = [];
try {
  if (!process.env.VERITY) throw new Error('VERITY (the verity binary) is not set');
  const { now_unix, cases } = JSON.parse(readFileSync(join(data, 'cases.json'), 'utf8'));
  dir = mkdtempSync(join(tmpdir(), 'verity-ct-'));
  for (const f of readdirSync(join(data, 'expected'))) {
    const exp = JSON.parse(readFileSync(join(data, 'expected', f), 'utf8'));
    const tpath = join(shared, 'templates', exp.template);
    if (!existsSync(tpath)) continue;
    const src = readFileSync(tpath, 'utf8');
    if (src.includes('bos_token') || src.includes('eos_token')) continue;
    for (const c of cases) {
      const e = exp.cases[c.name];
      // nested_args holds numbers (1e+20, 1.0) that JSON.parse/JSON.stringify rewrite (to
      // 100000000000000000000 and 1), which changes what tojson prints; the C tests cover it with
      // the numbers' source text intact (test_chat_template.c)
      if (!e || e.output === undefined || c.extra || c.name === 'nested_args') continue;
      writeFileSync(join(dir, 'm.json'), JSON.stringify(c.messages));
      const args = ['chat-template', '-m', vocab, '--template', tpath, '--messages', join(dir, 'm.json'), '--now', String(now_unix), '--tool-args', 'as-given'];
      if (c.tools) { writeFileSync(join(dir, 't.json'), JSON.stringify(c.tools)); args.push('--tools', join(dir, 't.json')); }
      if (!c.add_generation_prompt) args.push('--no-generation-prompt');
      let out;
      try { out = execFileSync(process.env.VERITY, args, { encoding: 'utf8' }); } catch (err) { out = `ERROR ${err.stderr}`; }
      compared++;
      if (out !== e.output) bad.push(`${exp.template}/${c.name}`);
    }
  }
} catch (e) {
  die(e);
} finally {
  if (dir) rmSync(dir, { recursive: true, force: true });
}
if (compared === 0) {
  console.log(`FAIL ${name}: nothing compared`);
  process.exit(1);
}
if (bad.length) {
  console.log(`FAIL ${name}: ${bad.length} of ${compared} differ: ${bad.slice(0, 5).join(', ')}`);
  process.exit(1);
}
console.log(`PASS ${name}(${compared} renderings)`);
