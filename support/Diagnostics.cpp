#include "support/Diagnostics.h"

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
  if (kind == llvm::SourceMgr::DK_Error && ++errors_ > kMaxShownErrors) {
    // Past the cap: count, but show nothing more (not even this error's notes).
    if (errors_ == kMaxShownErrors + 1)
      os_ << tool_ << ": error: too many errors (more than " << kMaxShownErrors
          << "); the rest are not shown\n";
    return;
  }
  if (errors_ > kMaxShownErrors)
    return;
  unsigned buffer = loc.isValid() ? mgr_.FindBufferContainingLoc(loc) : 0;
  if (buffer != 0) {
    printLocated(buffer, loc, kind, msg);
    return;
  }
  const char *label = kind == llvm::SourceMgr::DK_Error     ? "error"
                      : kind == llvm::SourceMgr::DK_Warning ? "warning"
                                                            : "note";
  os_ << tool_ << ": " << label << ": " << msg << "\n";
}

// "file:line:col: error: msg", the source line and a caret, as
// SourceMgr::PrintMessage prints them, except that it copies and echoes the
// whole line, which may be gigabytes long: show at most kMaxEchoedColumns of
// it around the location, found without scanning further than that.
void Diagnostics::printLocated(unsigned buffer, llvm::SMLoc loc,
                               llvm::SourceMgr::DiagKind kind, const llvm::Twine &msg) {
  const llvm::MemoryBuffer *mb = mgr_.getMemoryBuffer(buffer);
  const char *begin = mb->getBufferStart(), *end = mb->getBufferEnd();
  const char *at = loc.getPointer();
  auto [line, col] = mgr_.getLineAndColumn(loc, buffer);
  auto endsLine = [](char c) { return c == '\n' || c == '\r'; };
  const char *from = at;
  while (from > begin && !endsLine(from[-1]) &&
         static_cast<size_t>(at - from) < kMaxEchoedColumns / 2)
    --from;
  const char *to = at;
  while (to < end && !endsLine(*to) && static_cast<size_t>(to - from) < kMaxEchoedColumns)
    ++to;
  const bool cutBefore = from > begin && !endsLine(from[-1]);
  const bool cutAfter = to < end && !endsLine(*to);
  std::string excerpt = cutBefore ? "..." : "";
  excerpt.append(from, to);
  // The caret line keeps the excerpt's tabs, so the caret lines up anyway.
  std::string caret;
  for (size_t i = 0, n = static_cast<size_t>(at - from) + (cutBefore ? 3 : 0); i < n; ++i)
    caret += excerpt[i] == '\t' ? '\t' : ' ';
  if (cutAfter)
    excerpt += "...";

  os_ << mb->getBufferIdentifier() << ':' << line << ':' << col << ": ";
  switch (kind) {
  case llvm::SourceMgr::DK_Error:
    llvm::WithColor::error(os_, "");
    break;
  case llvm::SourceMgr::DK_Warning:
    llvm::WithColor::warning(os_, "");
    break;
  default:
    llvm::WithColor::note(os_, "");
    break;
  }
  os_ << msg << '\n' << excerpt << '\n' << caret << "^\n";
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
