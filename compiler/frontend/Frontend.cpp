// Picks the frontend for an input file.
#include "Frontend.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Path.h"

namespace dmuon {

std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path, Diagnostics &diags) {
  auto bufOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bufOr) {
    std::error_code ec = bufOr.getError();
    diags.fileError(path, ec == std::errc::no_such_file_or_directory
                              ? std::string("No such file or directory")
                              : ec.message());
    return nullptr;
  }
  return std::move(*bufOr);
}

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
