// The pending cache edits of a session (edit_log.h), on a small ring cache filled by hand.
//
// Independent computation: every row the test writes is a tag of its (layer, head, position, dim), so
// the rows and flags an edit should leave are written down here; undo must bring back exactly what
// the cache held before, newest edit first.
#include <catch2/catch.hpp>

#include <vector>

#include "base/errors.h"
#include "cache/kv_cache.h"
#include "run/edit_log.h"

using namespace kvscope;

namespace {

constexpr int64_t L = 2, K = 2, D = 3, N = 4;  // layers, K/V heads, head dim, positions written

float tag(int64_t il, int64_t h, int64_t p, int64_t d, bool value) {
    return float(p * 1000 + il * 100 + h * 10 + d) + (value ? 0.5f : 0.0f);
}

KvCache filled() {
    KvCache c(L, K, D, 8, 0);
    std::vector<TokenId> tokens(size_t(N), 1);
    c.prepare(tokens.data(), N);
    for (int64_t p = 0; p < N; ++p)
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < K; ++h) {
                float k[D], v[D];
                for (int64_t d = 0; d < D; ++d) {
                    k[d] = tag(il, h, p, d, false);
                    v[d] = tag(il, h, p, d, true);
                }
                c.write(il, h, p, k, v);
            }
    c.advance(N);
    return c;
}

std::vector<float> rows_of(const KvCache& c, int64_t il, int64_t h, int64_t p) {  // (2, D) K then V
    std::vector<float> out(2 * D);
    c.rows(il, h).copy_key(p, out.data());
    c.rows(il, h).copy_value(p, out.data() + D);
    return out;
}

std::vector<float> tags(int64_t il, int64_t h, int64_t p) {
    std::vector<float> out;
    for (bool value : {false, true})
        for (int64_t d = 0; d < D; ++d) out.push_back(tag(il, h, p, d, value));
    return out;
}

std::vector<int> flags_of(const KvCache& c, int64_t p) {  // (L, K) evicted flags of position p
    std::vector<int> out;
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < K; ++h) out.push_back(c.rows(il, h).evicted(p) ? 1 : 0);
    return out;
}

EditUndo undo_for(const KvCache& c, const CacheEdit& e, size_t n_turns = 1) {
    EditUndo u;
    u.entries = EditLog::changes(c, e, L, K);
    u.n_turns = n_turns;
    return u;
}

CacheEditRecord record_of(const CacheEdit& e) { return CacheEditRecord{e, 0, {}}; }

}  // namespace

TEST_CASE("an edit changes the (layer, head) pairs it names that it can change", "[edit_log]") {
    KvCache c = filled();
    CacheEdit all{CacheEditKind::Evict, 2, -1, -1, {}, {}};
    CHECK(EditLog::changes(c, all, L, K) == std::vector<int32_t>{0, 0, 0, 1, 1, 0, 1, 1});
    CacheEdit one_layer{CacheEditKind::Evict, 2, 1, -1, {}, {}};
    CHECK(EditLog::changes(c, one_layer, L, K) == std::vector<int32_t>{1, 0, 1, 1});
    c.set_evicted(1, 0, 2, true);  // already evicted: nothing to do there
    CHECK(EditLog::changes(c, all, L, K) == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
    CacheEdit restore{CacheEditKind::Restore, 2, -1, -1, {}, {}};
    CHECK(EditLog::changes(c, restore, L, K) == std::vector<int32_t>{1, 0});
    CacheEdit restore_other{CacheEditKind::Restore, 3, -1, -1, {}, {}};
    CHECK_THROWS_AS(EditLog::changes(c, restore_other, L, K), UsageError);
}

TEST_CASE("edits apply in order and undo newest first, exactly", "[edit_log]") {
    KvCache c = filled();
    EditLog log;
    CHECK(log.empty());
    // 1: evict position 1 everywhere; 2: restore it in layer 0, head 1; 3: patch position 2 in layer 1.
    const CacheEdit evict{CacheEditKind::Evict, 1, -1, -1, {}, {}};
    log.apply(c, evict, undo_for(c, evict));
    log.record(record_of(evict));
    CHECK(flags_of(c, 1) == std::vector<int>{1, 1, 1, 1});
    const CacheEdit restore{CacheEditKind::Restore, 1, 0, 1, {}, {}};
    log.apply(c, restore, undo_for(c, restore));
    log.record(record_of(restore));
    CHECK(flags_of(c, 1) == std::vector<int>{1, 0, 1, 1});
    c.set_evicted(1, 1, 2, true);  // a flag the patch must keep
    CacheEdit patch{CacheEditKind::Patch, 2, 1, -1, std::vector<float>(size_t(L * 2 * K * D)), {}};
    for (size_t i = 0; i < patch.rows.size(); ++i) patch.rows[i] = -float(i) - 1;  // (L, 2, K, D)
    log.apply(c, patch, undo_for(c, patch, 2));
    log.record(record_of(patch));
    REQUIRE(log.pending().size() == 3);
    CHECK(log.pending()[1].edit.kind == CacheEditKind::Restore);
    for (int64_t h = 0; h < K; ++h) {
        std::vector<float> want;  // rows[(il * 2 + kv) * K + h] for il = 1
        for (int64_t kv = 0; kv < 2; ++kv)
            for (int64_t d = 0; d < D; ++d) want.push_back(-float(((1 * 2 + kv) * K + h) * D + d) - 1);
        CHECK(rows_of(c, 1, h, 2) == want);
        CHECK(rows_of(c, 0, h, 2) == tags(0, h, 2));  // layer 0 untouched
    }
    CHECK(flags_of(c, 2) == std::vector<int>{0, 0, 0, 1});
    CHECK(log.newest_after(2));
    CHECK_FALSE(log.newest_after(1));

    log.undo_newest(c);  // the patch: rows back, the flag kept
    for (int64_t h = 0; h < K; ++h) CHECK(rows_of(c, 1, h, 2) == tags(1, h, 2));
    CHECK(flags_of(c, 2) == std::vector<int>{0, 0, 0, 1});
    CHECK(log.newest_after(1));
    log.undo_newest(c);  // the restore: evicted again
    CHECK(flags_of(c, 1) == std::vector<int>{1, 1, 1, 1});
    log.undo_newest(c);  // the eviction
    CHECK(flags_of(c, 1) == std::vector<int>{0, 0, 0, 0});
    CHECK(log.empty());
    CHECK(log.pending().empty());
}

TEST_CASE("the logits before the edits are the first edit's", "[edit_log]") {
    KvCache c = filled();
    EditLog log;
    const CacheEdit a{CacheEditKind::Evict, 0, 0, 0, {}, {}}, b{CacheEditKind::Evict, 3, 1, 1, {}, {}};
    EditUndo first = undo_for(c, a);
    first.logits_before = {1, 2, 3};
    log.apply(c, a, std::move(first));
    log.record(record_of(a));
    EditUndo second = undo_for(c, b);
    second.logits_before = {7, 8, 9};
    log.apply(c, b, std::move(second));
    log.record(record_of(b));
    CHECK(log.logits_before() == std::vector<float>{1, 2, 3});
    log.clear();
    CHECK(log.empty());
    CHECK(log.pending().empty());
    CHECK(c.rows(0, 0).evicted(0));  // clear() forgets the log; the cache keeps what the edits did (the step took them)
}
