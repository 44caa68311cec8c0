#include "base/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace kvscope {

namespace {
int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
}  // namespace

HugePageBlock::HugePageBlock(int64_t bytes) : size_(round_up(std::max<int64_t>(bytes, 1), kPageBytes)) {
    // Mapped one huge page longer than asked, so data_ can start on a 2 MiB boundary.
    mapped_ = size_t(size_ + kPageBytes);
    void* m = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    mapping_ = m;
    data_ = reinterpret_cast<std::byte*>(round_up(int64_t(reinterpret_cast<uintptr_t>(m)), kPageBytes));
    ::madvise(data_, size_t(size_), MADV_HUGEPAGE);  // advice only: fine if refused
}

void* allocate_streamed(size_t bytes) {
    const bool huge = bytes >= size_t(HugePageBlock::kPageBytes);
    const int64_t align = huge ? HugePageBlock::kPageBytes : 64;
    const size_t rounded = size_t(round_up(std::max<int64_t>(int64_t(bytes), 1), align));
    void* p = std::aligned_alloc(size_t(align), rounded);
    if (!p) throw std::bad_alloc();
    if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only, as for HugePageBlock
    return p;
}

void free_streamed(void* p) { std::free(p); }

HugePageBlock::~HugePageBlock() {
    if (mapping_) ::munmap(mapping_, mapped_);
}

HugePageBlock::HugePageBlock(HugePageBlock&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

HugePageBlock& HugePageBlock::operator=(HugePageBlock&& other) noexcept {
    if (this != &other) {
        if (mapping_) ::munmap(mapping_, mapped_);
        mapping_ = std::exchange(other.mapping_, nullptr);
        mapped_ = std::exchange(other.mapped_, 0);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

std::byte* HugePageArena::allocate(int64_t bytes) {
    bytes = round_up(std::max<int64_t>(bytes, 1), kAlign);
    if (blocks_.empty() || offset_ + bytes > blocks_.back().size()) {
        blocks_.emplace_back(std::max(bytes, kMinBlockBytes));
        offset_ = 0;
    }
    std::byte* p = blocks_.back().data() + offset_;
    offset_ += bytes;
    used_ += bytes;
    return p;
}

int64_t HugePageArena::reserved() const {
    int64_t n = 0;
    for (const HugePageBlock& b : blocks_) n += b.size();
    return n;
}

void copy_in_parallel(std::byte* to, const std::byte* from, int64_t bytes, const CopyVisitor& visit) {
    constexpr int64_t kMinPart = int64_t(4) << 20;  // below this a thread costs more than it saves
    constexpr int64_t kSlice = int64_t(256) << 10;  // a visited slice: still in L2 when visited
    const int64_t parts = std::clamp<int64_t>(bytes / kMinPart, 1, std::max(1u, std::thread::hardware_concurrency()));
    auto copy_part = [&](int64_t i) {
        const int64_t begin = i == 0 ? 0 : bytes * i / parts / 64 * 64;
        const int64_t end = i + 1 == parts ? bytes : bytes * (i + 1) / parts / 64 * 64;
        if (!visit) {
            std::memcpy(to + begin, from + begin, size_t(end - begin));
            return;
        }
        for (int64_t at = begin; at < end; at += kSlice) {
            const int64_t n = std::min(kSlice, end - at);
            std::memcpy(to + at, from + at, size_t(n));
            visit(to + at, at, n);
        }
    };
    std::vector<std::thread> helpers;
    int64_t i = 1;
    try {
        helpers.reserve(size_t(parts));
        for (; i < parts; ++i) helpers.emplace_back(copy_part, i);
    } catch (const std::exception&) {  // no thread to be had: this one copies what is left
        for (; i < parts; ++i) copy_part(i);
    }
    copy_part(0);
    for (std::thread& h : helpers) h.join();
}

}  // namespace kvscope
