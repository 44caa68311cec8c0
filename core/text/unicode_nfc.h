#pragma once
// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition;
// Unicode Standard Annex #15), as Qwen's tokenizer.json normalizer applies it to text first.
//
//   to_nfc(text)               NFC of UTF-8 text; invalid bytes pass through unchanged and block
//                              composition across them
//   unicode_nfc_version()      Unicode version of the tables (core/text/unicode_nfc_tables.inc, generated
//                              by tools/gen_unicode_nfc.js; do not edit them)
#include <string>
#include <string_view>

namespace kvscope {

std::string to_nfc(std::string_view text);
const char* unicode_nfc_version();

}  // namespace kvscope
