// fuzz_toml: the TOML manifest frontend on arbitrary text, with a fixed
// 3-D mesh (dp_replicate=2,dp_shard=2,tp=2) so that placements resolve.
// Errors are fine (diagnostics go to a null stream); crashes, leaks,
// sanitizer reports and hangs are not.
#include "support/Diagnostics.h"
#include "Frontend.h"
#include "Mesh.h"
#include "Model.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dmuon::Diagnostics diags("dmuonc", llvm::nulls());
  dmuon::PlanModel model;
  if (!dmuon::parseMesh("dp_replicate=2,dp_shard=2,tp=2", model.mesh, diags))
    std::abort();
  std::string_view text(reinterpret_cast<const char *>(data), size);
  if (dmuon::loadTomlManifestFromBuffer(text, "fuzz.toml", model, diags)) {
    // Every param the frontend accepts has one placement per mesh dim.
    for (const dmuon::Param &p : model.params)
      if (p.placements.size() != model.mesh.dims.size() || p.name.empty())
        std::abort();
  }
  return 0;
}
