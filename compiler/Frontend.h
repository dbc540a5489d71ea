// Frontends turn an input file into the ParamTable (PlanModel::params) in
// model order. They run after --mesh is parsed: placements are resolved
// against the mesh's dims.
#ifndef DMUON_COMPILER_FRONTEND_H
#define DMUON_COMPILER_FRONTEND_H

#include "Model.h"
#include "support/Diagnostics.h"
#include "support/InputFile.h"

#include "llvm/Support/MemoryBuffer.h"

#include <memory>
#include <string>
#include <string_view>

namespace dmuon {

enum class InputFormat { Auto, Toml, Onnx };

// TOML manifest, docs/manifest-format.md.
bool loadTomlManifest(const std::string &path, PlanModel &model, Diagnostics &diags);
// The same on manifest text already in memory; `name` stands for the file in
// diagnostics and gives the default model name (its stem).
bool loadTomlManifestFromBuffer(std::string_view text, const std::string &name,
                                PlanModel &model, Diagnostics &diags);
// ONNX model: initializers' names, dims and types only.
bool loadOnnxModel(const std::string &path, PlanModel &model, Diagnostics &diags);
// The same on the serialized model's bytes in memory (`name` as above).
bool loadOnnxModelFromBuffer(std::string_view bytes, const std::string &name,
                             PlanModel &model, Diagnostics &diags);
// The largest inputs dmuonc reads (docs/dmuonc.md, "Limits"). A manifest of
// 10M params (the most a manifest may expand to) written out one table per
// param stays below 1 GiB; protobuf parses at most 2 GiB, and an ONNX file's
// external weight data is never read.
inline constexpr uint64_t kMaxManifestBytes = uint64_t(1) << 30;
inline constexpr uint64_t kMaxOnnxBytes = (uint64_t(1) << 31) - 1;

// Picks the frontend from `format` or the file extension.
bool loadModel(const std::string &path, InputFormat format, PlanModel &model,
               Diagnostics &diags);

} // namespace dmuon

#endif
