#include "cache/cache_edit.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/errors.h"

namespace kvscope {

const char* cache_edit_kind_name(CacheEditKind k) {
    switch (k) {
        case CacheEditKind::Evict: return "evict";
        case CacheEditKind::Restore: return "restore";
        case CacheEditKind::Patch: return "patch";
    }
    return "?";
}

namespace {

// (V) log softmax in double: logit - max - log Σ exp(logit - max)
std::vector<double> log_softmax(std::span<const float> logits) {
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - max);
    const double log_sum = std::log(sum);
    std::vector<double> out(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - max - log_sum;
    return out;
}

TokenId argmax(std::span<const float> logits) {
    return TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first maximum
}

}  // namespace

EditComparison compare_distributions(std::span<const float> before, std::span<const float> after, size_t n_movers) {
    if (before.empty() || before.size() != after.size())
        throw UsageError("cannot compare distributions over " + std::to_string(before.size()) + " and " +
                         std::to_string(after.size()) + " tokens");
    const std::vector<double> lb = log_softmax(before), la = log_softmax(after);
    EditComparison c;
    std::vector<double> shift(lb.size());  // (V) |p_after - p_before|
    for (size_t i = 0; i < lb.size(); ++i) {
        const double pb = std::exp(lb[i]);
        c.kl += pb * (lb[i] - la[i]);
        shift[i] = std::abs(std::exp(la[i]) - pb);
    }
    c.top1_before = argmax(before);
    c.top1_after = argmax(after);
    c.p_top1_before = std::exp(lb[size_t(c.top1_before)]);
    c.p_top1_after = std::exp(la[size_t(c.top1_after)]);
    std::vector<TokenId> order(lb.size());
    std::iota(order.begin(), order.end(), TokenId(0));
    const size_t n = std::min(n_movers, order.size());
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(n), order.end(), [&](TokenId a, TokenId b) {
        return shift[size_t(a)] != shift[size_t(b)] ? shift[size_t(a)] > shift[size_t(b)] : a < b;
    });
    for (size_t i = 0; i < n; ++i) {
        const TokenId t = order[i];
        c.movers.push_back(TokenShift{t, std::exp(lb[size_t(t)]), std::exp(la[size_t(t)])});
    }
    return c;
}

}  // namespace kvscope
