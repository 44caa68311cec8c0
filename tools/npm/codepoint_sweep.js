#!/usr/bin/env node
// One case per Unicode code point (surrogates excepted), with tiktoken's gpt2 ids, to check that
// core/text/unicode_classes.cpp (from Node's ICU) classifies every code point as tiktoken's Rust core does.
// Each text puts the code point c next to a letter, a digit, spaces, a symbol and a newline:
//   "a" c "1" c " " c c "!" c "\n" c " x"
// so a different class for c (letter / number / white space / other) moves the piece boundaries.
//
//   node tools/npm/codepoint_sweep.js NPM_DIR OUT_JSONL      (about 10 s, 80 MB)
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, outPath] = process.argv.slice(2);
if (!npmDir || !outPath) {
    console.error('usage: codepoint_sweep.js NPM_DIR OUT_JSONL');
    process.exit(2);
}
const { get_encoding } = require(path.join(path.resolve(npmDir), 'node_modules', 'tiktoken'));
const enc = get_encoding('gpt2');
const out = fs.openSync(outPath, 'w');
let lines = [];
let n = 0;
for (let cp = 0; cp <= 0x10ffff; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    const text = 'a' + c + '1' + c + ' ' + c + c + '!' + c + '\n' + c + ' x';
    lines.push(JSON.stringify({ text, ids: Array.from(enc.encode_ordinary(text)) }));
    ++n;
    if (lines.length === 10000) {
        fs.writeSync(out, lines.join('\n') + '\n');
        lines = [];
    }
}
fs.writeSync(out, lines.join('\n') + '\n');
fs.closeSync(out);
enc.free();
console.log(`wrote ${n} code point cases to ${outPath}`);
