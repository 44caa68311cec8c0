#include "base/id_list.h"

#include <cerrno>
#include <cstdlib>

#include "base/errors.h"

namespace kvscope {

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what) {
    std::vector<int64_t> ids;
    size_t i = 0;
    while (i <= text.size()) {
        size_t comma = text.find(',', i);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(i, comma - i);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        char* end = nullptr;
        errno = 0;
        long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || errno == ERANGE)
            throw UsageError(what + ": '" + text + "' is not a comma-separated list of token ids");
        ids.push_back(v);
        i = comma + 1;
    }
    return ids;
}

}  // namespace kvscope
