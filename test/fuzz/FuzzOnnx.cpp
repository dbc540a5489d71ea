// fuzz_onnx: the ONNX frontend on arbitrary bytes (a serialized ModelProto),
// with a fixed HSDP mesh. Errors are fine (diagnostics go to a null stream);
// crashes, leaks, sanitizer reports and hangs are not.
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
  if (!dmuon::parseMesh("2x4", model.mesh, diags))
    std::abort();
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  if (dmuon::loadOnnxModelFromBuffer(bytes, "fuzz.onnx", model, diags)) {
    for (const dmuon::Param &p : model.params)
      if (p.placements.size() != model.mesh.dims.size() || p.name.empty())
        std::abort();
  }
  return 0;
}
