// Reading an input file whole, within a limit, with its errors reported as
// diagnostics: manifests, ONNX models, cost tables, cluster descriptions.
#ifndef DMUON_SUPPORT_INPUTFILE_H
#define DMUON_SUPPORT_INPUTFILE_H

#include "support/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dmuon {

// Reads an input file whole, refusing one of more than `maxBytes` (`what`
// names the kind of file for that message: "a TOML manifest"); on failure
// reports "'path': <reason>" and returns null.
std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path, Diagnostics &diags,
                                                  uint64_t maxBytes, const char *what);

} // namespace dmuon

#endif
