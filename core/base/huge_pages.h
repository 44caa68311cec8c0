#pragma once
// Memory in 2 MiB pages, for the bytes a decode step streams from front to back.
//
// Read from the model file's mapping, a weight matrix crosses a 4 KiB page every 4 KiB, and each crossing
// can be a TLB miss (a two-level page walk in a VM). On the Zen 4 VM one thread read the SmolLM2-135M-shape
// matrices at 19-21 GB/s from the mapping and at 31-32 GB/s from 2 MiB pages (one row at a time, in
// decode's order); two threads 29-31 against 34-36 GB/s.
//
//   HugePageBlock(bytes)   an anonymous mapping of at least `bytes`, zero-filled, 2 MiB aligned and advised
//                          for transparent huge pages. Advice only: a kernel that refuses it still gives
//                          4 KiB pages, and everything works. Throws std::bad_alloc when nothing is mapped.
//   HugePageArena          blocks handed out in pieces: allocate(bytes) returns memory aligned to 64 bytes
//                          that lives as long as the arena. Untouched parts of a block cost no memory.
//                          reserved() is the bytes mapped, used() the bytes handed out.
//   HugePageVector<T>      std::vector for other streamed arrays (the KV cache): an array of 2 MiB or more
//                          comes 2 MiB aligned and advised for huge pages (HugePageAllocator), a smaller one
//                          64-byte aligned. Attention reads every K/V row of a long context once per step,
//                          and a VM's TLB miss is a two-level walk: SmolLM2-135M shape, decode at position
//                          2000, Zen 3 VM, attention's perf samples -28 % (1 thread), decode 1.02x (1 thread)
//                          and 1.04x (2 threads), medians of 5 interleaved rounds
//   make_streamed_array<T>(n)   the same memory for n trivial T, uninitialised (untouched pages cost nothing)
//   copy_in_parallel(to, from, bytes)   memcpy split over the machine's cores: first touches of fresh
//                          pages are most of a load's copying cost, and in a VM that has handed freed memory
//                          back to its host they cost ~2.5 s per GB on one core (Zen 4 VM: Qwen2.5-0.5B fp32
//                          loads in 5.4-6.4 s after 20 s idle with one thread, 3.2-3.6 s with two, 0.4-0.6 s warm).
//                          `visit(copied, offset, n)`, when given, sees each 256 KiB slice right after it is
//                          copied, while it is still in cache (slices start at multiples of 64 bytes)
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

namespace kvscope {

class HugePageBlock {
public:
    static constexpr int64_t kPageBytes = int64_t(2) << 20;

    explicit HugePageBlock(int64_t bytes);
    ~HugePageBlock();
    HugePageBlock(HugePageBlock&& other) noexcept;
    HugePageBlock& operator=(HugePageBlock&& other) noexcept;
    HugePageBlock(const HugePageBlock&) = delete;
    HugePageBlock& operator=(const HugePageBlock&) = delete;

    std::byte* data() const { return data_; }
    int64_t size() const { return size_; }  // usable bytes from data(), a multiple of kPageBytes

private:
    void* mapping_ = nullptr;
    size_t mapped_ = 0;  // bytes mapped at mapping_ (size_ plus the slack used to align data_)
    std::byte* data_ = nullptr;
    int64_t size_ = 0;
};

class HugePageArena {
public:
    std::byte* allocate(int64_t bytes);
    int64_t reserved() const;
    int64_t used() const { return used_; }

private:
    static constexpr int64_t kMinBlockBytes = int64_t(32) << 20;
    static constexpr int64_t kAlign = 64;
    std::vector<HugePageBlock> blocks_;
    int64_t offset_ = 0;  // next free byte in blocks_.back()
    int64_t used_ = 0;
};

using CopyVisitor = std::function<void(const std::byte* copied, int64_t offset, int64_t n)>;
void copy_in_parallel(std::byte* to, const std::byte* from, int64_t bytes, const CopyVisitor& visit = {});

void* allocate_streamed(size_t bytes);  // HugePageAllocator's memory; throws std::bad_alloc
void free_streamed(void* p);

template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator
    T* allocate(size_t n) { return static_cast<T*>(allocate_streamed(n * sizeof(T))); }
    void deallocate(T* p, size_t) noexcept { free_streamed(p); }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

struct FreeStreamed {
    void operator()(void* p) const noexcept { free_streamed(p); }
};
template <class T>
using StreamedArray = std::unique_ptr<T[], FreeStreamed>;

template <class T>
StreamedArray<T> make_streamed_array(size_t n) {
    static_assert(std::is_trivially_default_constructible_v<T>, "the elements are left uninitialised");
    return StreamedArray<T>(static_cast<T*>(allocate_streamed(n * sizeof(T))));
}

}  // namespace kvscope
