#pragma once
// A panel's view derived from one step record, made again only when the record or the panel's own key
// (layer, head, selected position, ...) changes. The record is named by the record itself, held: never by
// a step index (a new prompt of the same length reuses the indices) and never by a bare address (a reset,
// a step back or a model switch frees records, and a new one may take the address). While the cache holds
// the record no other record can have its address, so a new prompt, a step back or a model switch always
// makes the view again.
//
//   RecordCache<Key, Value>        the last value made and the (record, key) it was made from
//   get(record, key, make)         the value, refilled by make(Value&) first when record or key differ;
//                                  make fills in place, so a value holding textures can reuse them
//   makes()                        how many times make ran (tests)
//
// Threads: one cache belongs to one thread (the drawing thread for the panels).
#include <cstdint>
#include <memory>

#include "run/trace.h"

namespace kvscope::gui {

template <class Key, class Value>
class RecordCache {
public:
    template <class Make>
    const Value& get(std::shared_ptr<const StepRecord> record, const Key& key, Make&& make) {
        if (!record_ || record_ != record || !(key_ == key)) {
            make(value_);
            record_ = std::move(record), key_ = key;
            ++makes_;
        }
        return value_;
    }
    uint64_t makes() const { return makes_; }

private:
    std::shared_ptr<const StepRecord> record_;  // held, so that its address names it
    Key key_{};
    Value value_{};
    uint64_t makes_ = 0;
};

}  // namespace kvscope::gui
