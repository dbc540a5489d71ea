#include "Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

namespace dmuon {

llvm::SMLoc MeshSource::loc(size_t col) const {
  const llvm::MemoryBuffer *buf = mgr->getMemoryBuffer(buffer);
  size_t n = buf->getBufferSize();
  return llvm::SMLoc::getFromPointer(buf->getBufferStart() + (col < n ? col : n));
}

Diagnostics::Diagnostics(std::string toolName, llvm::raw_ostream &os)
    : tool_(std::move(toolName)), os_(os) {}

void Diagnostics::print(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
                        const llvm::Twine &msg) {
  if (kind == llvm::SourceMgr::DK_Error)
    ++errors_;
  if (loc.isValid() && mgr_.FindBufferContainingLoc(loc) != 0) {
    mgr_.PrintMessage(os_, loc, kind, msg);
    return;
  }
  const char *label = kind == llvm::SourceMgr::DK_Error     ? "error"
                      : kind == llvm::SourceMgr::DK_Warning ? "warning"
                                                            : "note";
  os_ << tool_ << ": " << label << ": " << msg << "\n";
}

void Diagnostics::error(llvm::SMLoc loc, const llvm::Twine &msg) {
  print(loc, llvm::SourceMgr::DK_Error, msg);
}
void Diagnostics::error(const llvm::Twine &msg) {
  print(llvm::SMLoc(), llvm::SourceMgr::DK_Error, msg);
}
void Diagnostics::fileError(std::string_view path, const llvm::Twine &msg) {
  print(llvm::SMLoc(), llvm::SourceMgr::DK_Error,
        "'" + llvm::Twine(llvm::StringRef(path.data(), path.size())) + "': " + msg);
}
void Diagnostics::warning(llvm::SMLoc loc, const llvm::Twine &msg) {
  print(loc, llvm::SourceMgr::DK_Warning, msg);
}
void Diagnostics::warning(const llvm::Twine &msg) {
  print(llvm::SMLoc(), llvm::SourceMgr::DK_Warning, msg);
}
void Diagnostics::note(llvm::SMLoc loc, const llvm::Twine &msg) {
  print(loc, llvm::SourceMgr::DK_Note, msg);
}

unsigned Diagnostics::addBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer) {
  return mgr_.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
}

llvm::SMLoc Diagnostics::locFor(unsigned buffer, unsigned line, unsigned col) const {
  if (line == 0)
    return llvm::SMLoc();
  return mgr_.FindLocForLineAndColumn(buffer, line, col == 0 ? 1 : col);
}

std::string Diagnostics::describe(llvm::SMLoc loc) const {
  if (!loc.isValid())
    return {};
  unsigned buf = mgr_.FindBufferContainingLoc(loc);
  if (buf == 0)
    return {};
  auto [line, col] = mgr_.getLineAndColumn(loc, buf);
  return (mgr_.getMemoryBuffer(buf)->getBufferIdentifier() + ":" +
          llvm::Twine(line) + ":" + llvm::Twine(col))
      .str();
}

MeshSource Diagnostics::addMeshSource(std::string_view text) {
  unsigned id = mgr_.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text.data(), text.size()),
                                           "<mesh>"),
      llvm::SMLoc());
  return MeshSource{&mgr_, id};
}

} // namespace dmuon
