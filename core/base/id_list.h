#pragma once
// Token ids typed as text: "1, 2,3" -> {1, 2, 3}. The CLI's --prompt-ids and the window's prompt box
// (for a model without tokenizer files) read them the same way.
//
//   parse_id_list(text, what)   the integers; throws UsageError "WHAT: 'TEXT' is not a comma-separated list..."
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what);

}  // namespace kvscope
