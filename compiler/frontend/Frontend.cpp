// Picks the frontend for an input file.
#include "Frontend.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace dmuon {

bool loadModel(const std::string &path, InputFormat format, PlanModel &model,
               Diagnostics &diags) {
  if (format == InputFormat::Auto) {
    llvm::StringRef ext = llvm::sys::path::extension(path);
    if (ext.equals_insensitive(".toml"))
      format = InputFormat::Toml;
    else if (ext.equals_insensitive(".onnx"))
      format = InputFormat::Onnx;
  }
  switch (format) {
  case InputFormat::Toml:
    return loadTomlManifest(path, model, diags);
  case InputFormat::Onnx:
    return loadOnnxModel(path, model, diags);
  case InputFormat::Auto:
    break;
  }
  diags.fileError(path, "cannot tell the input format from the extension; use "
                        "--input-format=toml|onnx");
  return false;
}

} // namespace dmuon
