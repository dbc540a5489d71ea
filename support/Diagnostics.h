// Diagnostics in LLVM's form: "file:line:col: error: msg" with the source line
// and a caret where a location is known, "<tool>: error: msg" otherwise.
#ifndef DMUON_SUPPORT_DIAGNOSTICS_H
#define DMUON_SUPPORT_DIAGNOSTICS_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <string_view>

namespace dmuon {

// A location inside the `--mesh` text, which has its own pseudo-buffer.
struct MeshSource {
  const llvm::SourceMgr *mgr = nullptr;
  unsigned buffer = 0;
  llvm::SMLoc loc(size_t col) const;
};

class Diagnostics {
public:
  explicit Diagnostics(std::string toolName, llvm::raw_ostream &os = llvm::errs());

  void error(llvm::SMLoc loc, const llvm::Twine &msg);
  void error(const llvm::Twine &msg);
  void fileError(std::string_view path, const llvm::Twine &msg);
  void warning(llvm::SMLoc loc, const llvm::Twine &msg);
  void warning(const llvm::Twine &msg);
  void note(llvm::SMLoc loc, const llvm::Twine &msg);

  unsigned errorCount() const { return errors_; }
  bool hasErrors() const { return errors_ != 0; }

  // Registers a source file so later passes can point into it.
  unsigned addBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer);
  // line and col are 1-based, as toml++ reports them.
  llvm::SMLoc locFor(unsigned buffer, unsigned line, unsigned col) const;
  // "file:line:col" for the plan's param table.
  std::string describe(llvm::SMLoc loc) const;
  MeshSource addMeshSource(std::string_view text);
  const std::string &toolName() const { return tool_; }

  // Errors past this many are counted but not shown (a manifest of 10M
  // params with the same mistake gives one screenful, not 10M errors).
  static constexpr unsigned kMaxShownErrors = 100;
  // The most columns of a source line a diagnostic echoes.
  static constexpr size_t kMaxEchoedColumns = 200;

private:
  void print(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind, const llvm::Twine &msg);
  void printLocated(unsigned buffer, llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
                    const llvm::Twine &msg);

  std::string tool_;
  llvm::raw_ostream &os_;
  mutable llvm::SourceMgr mgr_; // lookups build line caches lazily
  unsigned errors_ = 0;
};

} // namespace dmuon

#endif
