// Frontends turn an input file into the ParamTable (PlanModel::params) in
// model order. They run after --mesh is parsed: placements are resolved
// against the mesh's dims.
#ifndef DMUON_COMPILER_FRONTEND_H
#define DMUON_COMPILER_FRONTEND_H

#include "Diagnostics.h"
#include "Model.h"

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
// Reads an input file whole; on failure reports "'path': <reason>" and
// returns null. Shared by the frontends.
std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path, Diagnostics &diags);

// Picks the frontend from `format` or the file extension.
bool loadModel(const std::string &path, InputFormat format, PlanModel &model,
               Diagnostics &diags);

} // namespace dmuon

#endif
