// The FlatBuffers builder's memory for a plan. A large plan's buffer (388 MB
// at 1M params) is far past glibc's mmap threshold, so glibc maps it fresh
// in 4 KiB pages, and the first touch of each cost a page fault: building a
// 1M-param plan cost 1.7x per param what a 100k one did (docs/benchmarks.md,
// "Compiler scaling"). Such buffers are mapped here with transparent huge
// pages where the kernel offers them (its "madvise" mode), as the tools'
// preferHugePageHeap does for the heap; smaller ones come from the heap.
#ifndef DMUON_COMPILER_EMIT_BUILDERALLOCATOR_H
#define DMUON_COMPILER_EMIT_BUILDERALLOCATOR_H

#include <flatbuffers/flatbuffers.h>

#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dmuon {

class BuilderAllocator final : public flatbuffers::Allocator {
public:
  // Buffers of this size or more are mapped on their own (glibc's largest
  // mmap threshold).
  static constexpr size_t kMappedBytes = size_t{32} << 20;

  uint8_t *allocate(size_t size) override {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= kMappedBytes) {
      // Over-map by one huge page and trim both ends, so the buffer starts
      // on a huge-page boundary whatever the kernel's placement.
      const size_t length = mappedLength(size);
      void *raw = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED)
        throw std::bad_alloc();
      auto *base = static_cast<uint8_t *>(raw);
      const auto at = reinterpret_cast<uintptr_t>(base);
      auto *aligned = reinterpret_cast<uint8_t *>((at + kHugePage - 1) & ~(kHugePage - 1));
      if (aligned > base)
        munmap(base, static_cast<size_t>(aligned - base));
      if (const auto tail = static_cast<size_t>(base + kHugePage - aligned))
        munmap(aligned + length, tail);
      madvise(aligned, length, MADV_HUGEPAGE); // a hint: ignore errors
      return aligned;
    }
#endif
    return new uint8_t[size];
  }

  void deallocate(uint8_t *p, size_t size) override {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= kMappedBytes) {
      munmap(p, mappedLength(size));
      return;
    }
#endif
    delete[] p;
  }

  // The one instance every builder and detached plan buffer points to: it
  // has no state, and outlives every buffer.
  static BuilderAllocator &instance() {
    static BuilderAllocator allocator;
    return allocator;
  }

private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static size_t mappedLength(size_t size) { return (size + kHugePage - 1) & ~(kHugePage - 1); }
};

} // namespace dmuon

#endif
