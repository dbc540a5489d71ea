#include "support/InputFile.h"

#include "common/BoundedRead.h"

#include "llvm/Support/FileSystem.h"

namespace dmuon {

std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path, Diagnostics &diags,
                                                  uint64_t maxBytes, const char *what) {
  // A regular file within the limit is mapped; anything else (a FIFO, a
  // device such as /dev/zero) is read, but never past the limit.
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st) && llvm::sys::fs::is_regular_file(st)) {
    if (st.getSize() > maxBytes) {
      diags.fileError(path, "the file is larger than " + common::bytesText(maxBytes) +
                                ", the limit for " + what);
      return nullptr;
    }
    // Read, not mapped (LLVM reads a file it is told may change): the bytes
    // are the tool's own, so a file truncated while it runs cannot fault it.
    auto bufOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                             /*RequiresNullTerminator=*/true,
                                             /*IsVolatile=*/true);
    if (bufOr)
      return std::move(*bufOr);
    std::error_code ec = bufOr.getError();
    diags.fileError(path, ec == std::errc::no_such_file_or_directory
                              ? std::string("No such file or directory")
                              : ec.message());
    return nullptr;
  }
  std::string bytes;
  if (std::string err = common::readFileBounded(path, maxBytes, what, bytes); !err.empty()) {
    diags.fileError(path, err);
    return nullptr;
  }
  return llvm::MemoryBuffer::getMemBufferCopy(bytes, path);
}

} // namespace dmuon
