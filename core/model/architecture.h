#pragma once
// What a model's config.json means for its forward pass, in words: shared by `kvscope inspect` and the
// GUI's Model panel so both explain the same keys the same way.
//
//   architecture(config)   one line per key that shapes the computation (sizes excluded), in a fixed order
#include <string>
#include <vector>

#include "model/config.h"

namespace kvscope {

struct ArchLine {
    const char* key;      // config.json key
    bool extension;       // a kvscope key, not in Hugging Face's GPT-2 config
    std::string value;    // as config.json spells it
    std::string label;    // a few words for a chip: "post-LN", "untied head"
    std::string meaning;  // what it does to the computation
    bool differs;         // not what GPT-2 does
};

std::vector<ArchLine> architecture(const ModelConfig& c);

}  // namespace kvscope
