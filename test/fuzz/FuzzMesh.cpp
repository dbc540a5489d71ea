// fuzz_mesh: the --mesh parser on arbitrary text. Whatever it accepts must be
// a consistent mesh: its world size fits, ranks and coordinates round-trip,
// and its canonical string parses back to the same mesh.
#include "support/Diagnostics.h"
#include "Mesh.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  dmuon::Diagnostics diags("dmuonc", llvm::nulls());
  dmuon::Mesh mesh;
  if (!dmuon::parseMesh(text, mesh, diags))
    return 0;
  int64_t world = mesh.worldSize();
  if (world < 1 || mesh.numSlots() < 1 || world % mesh.numSlots() != 0)
    std::abort();
  for (int64_t rank : {int64_t(0), world / 2, world - 1})
    if (mesh.rankOf(mesh.coordOf(rank)) != rank)
      std::abort();
  for (int64_t s : {int64_t(0), mesh.numShards() - 1})
    for (int64_t r : {int64_t(0), mesh.numReplicas() - 1})
      if (mesh.slotRank(s, r) < 0 || mesh.slotRank(s, r) >= world)
        std::abort();
  dmuon::Mesh again;
  std::string canon = mesh.str();
  if (!dmuon::parseMesh(canon, again, diags) || again.str() != canon ||
      again.shardDim != mesh.shardDim || again.replicateDim != mesh.replicateDim)
    std::abort();
  return 0;
}
