// The FlatBuffers builder's memory for a plan. glibc maps any block past its
// mmap threshold fresh in 4 KiB pages; for a very large plan's buffer (388 MB
// at 1M params) the first touch of each page cost so much that building the
// plan cost 1.7x per param what a 100k-param plan did (docs/benchmarks.md,
// "Compiler scaling"). Buffers that large are mapped with transparent huge
// pages where the kernel offers them (its "madvise" mode). Smaller ones come
// from the heap: at 40-60 MB (Kimi K2, 100k params) huge pages were measured
// slower, the kernel zeroing and compacting whole 2 MiB pages.
//
// Only a function is declared here: with a second Allocator subclass in
// sight, the compiler no longer devirtualizes the builder's default one,
// and the writer ran 30% more instructions.
#ifndef DMUON_COMPILER_EMIT_BUILDERALLOCATOR_H
#define DMUON_COMPILER_EMIT_BUILDERALLOCATOR_H

#include <cstddef>
#include <memory>

namespace flatbuffers {
class Allocator;
}

namespace dmuon {

// Buffers of this size or more are mapped on their own.
inline constexpr size_t kHugePageBufferBytes = size_t{256} << 20;

// An allocator that maps buffers of `mappedBytes` or more (huge-page
// aligned and advised) and takes smaller ones from the heap. The default
// one is what every plan builder uses; it outlives every buffer.
flatbuffers::Allocator &planBufferAllocator();
// One with another threshold, for tests: it must outlive the buffers it
// gives.
std::unique_ptr<flatbuffers::Allocator> newPlanBufferAllocator(size_t mappedBytes);

} // namespace dmuon

#endif
