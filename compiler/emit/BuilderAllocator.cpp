#include "emit/BuilderAllocator.h"

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dmuon {

namespace {

class BuilderAllocator final : public flatbuffers::Allocator {
public:
  explicit BuilderAllocator(size_t mappedBytes) : mappedBytes_(mappedBytes) {}

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

private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static size_t mappedLength(size_t size) { return (size + kHugePage - 1) & ~(kHugePage - 1); }

  size_t mappedBytes_;
};

} // namespace

flatbuffers::Allocator &planBufferAllocator() {
  static BuilderAllocator allocator(kHugePageBufferBytes);
  return allocator;
}

std::unique_ptr<flatbuffers::Allocator> newPlanBufferAllocator(size_t mappedBytes) {
  return std::make_unique<BuilderAllocator>(mappedBytes);
}

} // namespace dmuon
