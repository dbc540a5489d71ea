// The FlatBuffers builder's memory for a plan. glibc maps any block past its
// mmap threshold fresh in 4 KiB pages; for a very large plan's buffer (388 MB
// at 1M params) the first touch of each page cost so much that building the
// plan cost 1.7x per param what a 100k-param plan did (docs/benchmarks.md,
// "Compiler scaling"). Buffers that large are mapped here with transparent
// huge pages where the kernel offers them (its "madvise" mode). Smaller ones
// come from the heap: at 40-60 MB (Kimi K2, 100k params) huge pages were
// measured slower, the kernel zeroing and compacting whole 2 MiB pages.
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
  // Buffers of this size or more are mapped on their own.
  static constexpr size_t kDefaultMappedBytes = size_t{256} << 20;

  explicit BuilderAllocator(size_t mappedBytes = kDefaultMappedBytes)
      : mappedBytes_(mappedBytes) {}

  uint8_t *allocate(size_t size) override {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= mappedBytes_) {
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
    if (size >= mappedBytes_) {
      munmap(p, mappedLength(size));
      return;
    }
#endif
    delete[] p;
  }

  // The instance every plan builder and detached plan buffer points to: it
  // outlives every buffer.
  static BuilderAllocator &instance() {
    static BuilderAllocator allocator;
    return allocator;
  }

private:
  size_t mappedBytes_;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static size_t mappedLength(size_t size) { return (size + kHugePage - 1) & ~(kHugePage - 1); }
};

} // namespace dmuon

#endif
