// fuzz_checkpoint: the checkpoint readers (runtime/checkpoint/CheckpointFile.h) on
// arbitrary bytes, taken both as a manifest and as a shard file. Checksums
// would stop almost every mutation at the first check, so each input is also
// tried with its checksum restamped, which takes the fuzzer into the line and
// entry parsers. Whatever they accept must be consistent: a manifest names
// one distinct, plain shard file per rank; an index's entries lie inside the
// data, and each slice either fits a param shape or is refused by resolve.
#include "checkpoint/CheckpointFile.h"
#include "checkpoint/CheckpointSlice.h"
#include "plan/Fingerprint.h"

#include "common/Hex.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace ckpt = dmuon::rt::ckpt;

namespace {

void manifest(const std::string &text) {
  ckpt::Manifest m;
  if (!ckpt::parseManifest(text, "fuzz/checkpoint", m))
    return;
  std::set<std::string> names(m.shards.begin(), m.shards.end());
  if (m.worldSize < 1 || m.shards.size() != static_cast<size_t>(m.worldSize) ||
      names.size() != m.shards.size() || m.step < 0 || m.adamwStep < 0)
    std::abort();
  for (const std::string &s : m.shards)
    if (s.find('/') != std::string::npos || s == "." || s == "..")
      std::abort();
}

// The body (everything before the last "end 0x" line, or all of it) with a
// correct end line.
std::string restampManifest(const std::string &text) {
  const size_t end = text.rfind("end 0x");
  const std::string body = end == std::string::npos ? text : text.substr(0, end);
  return body + "end " +
         dmuon::common::hex64(dmuon::planfile::fnv1a64(
             reinterpret_cast<const uint8_t *>(body.data()), body.size())) +
         "\n";
}

void shard(const uint8_t *data, size_t size, bool restamp) {
  if (size < 24)
    return;
  uint8_t header[ckpt::kShardHeaderBytes] = {};
  std::memcpy(header, data, std::min(size, sizeof header));
  ckpt::ShardHeader h;
  if (!ckpt::parseShardHeader("fuzz.dmck", header, size, h))
    return;
  std::vector<uint8_t> index(data + h.indexOffset, data + size);
  if (restamp && index.size() >= 8) {
    const uint64_t sum = dmuon::planfile::fnv1a64(index.data(), index.size() - 8);
    std::memcpy(index.data() + index.size() - 8, &sum, 8);
  }
  ckpt::ShardIndex out;
  if (!ckpt::parseShardIndex("fuzz.dmck", h, index, out))
    return;
  if (out.entries.size() != h.count)
    std::abort();
  const std::vector<int64_t> shapes[] = {{}, {16}, {4, 8}, {2, 4, 8}};
  for (const ckpt::Entry &e : out.entries) {
    if (e.offset > h.indexOffset || e.bytes > h.indexOffset - e.offset)
      std::abort();
    for (const std::vector<int64_t> &shape : shapes) {
      ckpt::Slice box;
      if (!ckpt::resolve(e.slice, shape, box).empty())
        continue;
      // A resolved slice lies inside the shape, so its numel cannot overflow.
      for (size_t k = 0; k < shape.size(); ++k)
        if (box.offset[k] < 0 || box.shape[k] < 0 || box.offset[k] + box.shape[k] > shape[k])
          std::abort();
      // Copy it into the whole param: must fit, whatever the box.
      ckpt::Slice whole{std::vector<int64_t>(shape.size(), 0), shape};
      std::vector<float> src(static_cast<size_t>(box.numel()), 1.0f),
          dst(static_cast<size_t>(whole.numel()), 0.0f);
      std::vector<uint8_t> covered(dst.size(), 0);
      if (!ckpt::copyOverlap(src.data(), box, dst.data(), whole, covered))
        std::abort(); // nothing was covered before
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  manifest(text);
  manifest(restampManifest(text));
  shard(data, size, false);
  shard(data, size, true);
  return 0;
}
