#!/usr/bin/env node
// Writes core/text/unicode_nfc_tables.inc: the data NFC normalization needs (Unicode Standard Annex #15),
// taken from this Node's ICU through String.prototype.normalize, so that it has the same Unicode version
// as core/text/unicode_classes.cpp (tools/gen_unicode_classes.js, the same Node) and as the JavaScript
// tokenizers the tests compare against.
//
//   node tools/gen_unicode_nfc.js > core/text/unicode_nfc_tables.inc
//
// Made with Node 20 (process.versions.unicode is written into the file); re-run both generators with the
// same Node. Needs nothing outside Node. Tables (each sorted by its first column, for binary search):
//   k_ccc              (code point, canonical combining class) for every code point with a class != 0 and
//                      no canonical decomposition (the reader looks classes up only after decomposing)
//   k_decomposition    (code point, offset, length) into k_decomposition_cps: NFD of the code point,
//                      Hangul syllables left to the algorithm
//   k_composition      (first, second, composite) for every primary composite
'use strict';

const MAX = 0x110000;
const str = (...cps) => String.fromCodePoint(...cps);
const cps = (s) => [...s].map((c) => c.codePointAt(0));
const hex = (cp) => 'U+' + cp.toString(16).toUpperCase().padStart(4, '0');
const fail = (msg) => { process.stderr.write('gen_unicode_nfc.js: ' + msg + '\n'); process.exit(1); };

// normalize() shows a class only by the order it puts marks in, which gives each mark's rank among the
// classes but not the number. The numbers come from one mark per class: a class, once given to a
// character, never changes (Unicode's normalization stability policy), so these pairs hold in every
// later version. A class that Unicode adds later has no entry here, and the run stops naming its marks.
const KNOWN = [
    [1, 0x0334], [6, 0x16FF0], [7, 0x093C], [8, 0x3099], [9, 0x094D], [10, 0x05B0], [11, 0x05B1],
    [12, 0x05B2], [13, 0x05B3], [14, 0x05B4], [15, 0x05B5], [16, 0x05B6], [17, 0x05B7], [18, 0x05B8],
    [19, 0x05B9], [20, 0x05BB], [21, 0x05BC], [22, 0x05BD], [23, 0x05BF], [24, 0x05C1], [25, 0x05C2],
    [26, 0xFB1E], [27, 0x064B], [28, 0x064C], [29, 0x064D], [30, 0x0618], [31, 0x0619], [32, 0x061A],
    [33, 0x0651], [34, 0x0652], [35, 0x0670], [36, 0x0711], [84, 0x0C55], [91, 0x0C56], [103, 0x0E38],
    [107, 0x0E48], [118, 0x0EB8], [122, 0x0EC8], [129, 0x0F71], [130, 0x0F72], [132, 0x0F74],
    [202, 0x0321], [214, 0x1DCE], [216, 0x031B], [218, 0x1DFA], [220, 0x0316], [222, 0x059A],
    [224, 0x302E], [226, 0x1D16D], [228, 0x05AE], [230, 0x0300], [232, 0x0315], [233, 0x035C],
    [234, 0x035D], [240, 0x0345],
];
const LOW = 0x0334, HIGH = 0x0301;  // classes 1 and 230

const isHangul = (cp) => cp >= 0xac00 && cp <= 0xd7a3;
const isSurrogate = (cp) => cp >= 0xd800 && cp <= 0xdfff;

// Does NFD put y before x in "a x y"? Then class(x) > class(y) > 0.
const swaps = (x, y) => str(0x61, x, y).normalize('NFD') === str(0x61, y, x);

// pass 1: decompositions, and the marks (non-decomposing code points with a class != 0)
const decomp = [];  // [cp, full decomposition]
const marks = [];
for (let cp = 0; cp < MAX; ++cp) {
    if (isSurrogate(cp) || isHangul(cp)) continue;
    const s = str(cp);
    const d = s.normalize('NFD');
    if (d !== s) {
        decomp.push([cp, cps(d)]);
        continue;
    }
    // class > 1 moves it after a class-1 mark; 0 < class < 230 moves it before a class-230 one; class 1 both
    // ways is caught by the second test (1 < 230).
    if (cp !== LOW && cp !== HIGH ? swaps(cp, LOW) || swaps(HIGH, cp) : true) marks.push(cp);
}

// pass 2: group the marks by class (equal = neither order swaps) and order the groups
const cmp = (x, y) => (swaps(x, y) ? 1 : swaps(y, x) ? -1 : 0);
marks.sort((x, y) => cmp(x, y) || x - y);
const groups = [];
for (const cp of marks) {
    const last = groups[groups.length - 1];
    if (last && cmp(last[0], cp) === 0) last.push(cp);
    else groups.push([cp]);
}
const classOf = new Map(KNOWN.map(([c, cp]) => [cp, c]));
const ccc = [];
let previous = 0;
for (const g of groups) {
    const known = g.filter((cp) => classOf.has(cp));
    if (known.length !== 1)
        fail(`a class of ${g.length} marks (${g.slice(0, 5).map(hex).join(' ')} ...) holds ${known.length} of the known ` +
             `marks: add a mark of each new class to KNOWN with its number from UnicodeData.txt`);
    const c = classOf.get(known[0]);
    if (c <= previous) fail(`classes out of order at ${hex(known[0])} (${c} after ${previous})`);
    previous = c;
    for (const cp of g) ccc.push([cp, c]);
}
if (groups.length !== KNOWN.length) fail(`${KNOWN.length - groups.length} known marks were not found as marks`);
ccc.sort((a, b) => a[0] - b[0]);

// pass 3: primary composites -- a decomposing code point that NFC keeps (not a composition exclusion).
// Its canonical pair is (NFC of all but the last code point of its NFD, that last code point); the pair
// must compose back to it.
const comp = [];
for (const [cp, d] of decomp) {
    if (str(cp).normalize('NFC') !== str(cp)) continue;
    const first = cps(str(...d.slice(0, -1)).normalize('NFC'));
    const second = d[d.length - 1];
    if (first.length !== 1 || str(first[0], second).normalize('NFC') !== str(cp))
        fail(`no canonical pair found for the composite ${hex(cp)}`);
    comp.push([first[0], second, cp]);
}
comp.sort((a, b) => a[0] - b[0] || a[1] - b[1]);

const h5 = (cp) => '0x' + cp.toString(16).toUpperCase().padStart(5, '0');
const out = [];
out.push(`// Generated by tools/gen_unicode_nfc.js from Node ${process.version}'s ICU ${process.versions.icu} ` +
         `(Unicode ${process.versions.unicode}); do not edit.`);
out.push(`constexpr const char* k_nfc_unicode_version = "${process.versions.unicode}";`);
out.push('constexpr CombiningClass k_ccc[] = {');
for (const [cp, c] of ccc) out.push(`    {${h5(cp)}, ${c}},`);
out.push('};');
const flat = [];
const entries = [];
for (const [cp, d] of decomp) {
    entries.push(`    {${h5(cp)}, ${flat.length}, ${d.length}},`);
    flat.push(...d);
}
out.push('constexpr char32_t k_decomposition_cps[] = {');
for (let i = 0; i < flat.length; i += 12) out.push('    ' + flat.slice(i, i + 12).map((x) => h5(x) + ',').join(' '));
out.push('};');
out.push('constexpr Decomposition k_decomposition[] = {');
out.push(...entries);
out.push('};');
out.push('constexpr Composition k_composition[] = {');
for (const [a, b, c] of comp) out.push(`    {${h5(a)}, ${h5(b)}, ${h5(c)}},`);
out.push('};');
process.stdout.write(out.join('\n') + '\n');
