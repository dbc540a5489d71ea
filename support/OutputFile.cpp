#include "support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace dmuon {

bool sameFile(llvm::StringRef a, llvm::StringRef b) {
  if (a.empty() || b.empty() || a == "-" || b == "-")
    return false;
  bool same = false;
  // status() follows symlinks: a link to the input is the input.
  if (!llvm::sys::fs::equivalent(a, b, same))
    return same;
  // One is not there yet (two outputs of one run): the same path once made
  // absolute and rid of "." and "..".
  llvm::SmallString<256> pathA(a), pathB(b);
  llvm::sys::fs::make_absolute(pathA);
  llvm::sys::fs::make_absolute(pathB);
  llvm::sys::path::remove_dots(pathA, /*remove_dot_dot=*/true);
  llvm::sys::path::remove_dots(pathB, /*remove_dot_dot=*/true);
  return pathA == pathB;
}

bool checkOutputIsNotInput(llvm::StringRef output, llvm::ArrayRef<RunInput> inputs,
                           Diagnostics &diags) {
  for (const RunInput &in : inputs)
    if (sameFile(output, in.path)) {
      diags.error("output '" + output + "' is the input '" + in.path + "' (" + in.what +
                  "); writing it would destroy the input");
      return false;
    }
  return true;
}

namespace {

// Flushes `os` and reports a write error on it as `path`'s.
bool flushed(llvm::raw_fd_ostream &os, llvm::StringRef path, Diagnostics &diags) {
  os.flush();
  if (!os.has_error())
    return true;
  diags.fileError(path.str(), os.error().message());
  // Seen and reported: raw_fd_ostream would otherwise abort at exit.
  os.clear_error();
  return false;
}

// Writes in place: for what cannot be renamed over (a device, a pipe).
bool writeInPlace(llvm::StringRef path, llvm::StringRef contents, Diagnostics &diags) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    diags.fileError(path.str(), ec.message());
    return false;
  }
  os << contents;
  return flushed(os, path, diags);
}

} // namespace

bool writeOutputFile(llvm::StringRef path, llvm::StringRef contents, Diagnostics &diags) {
  namespace fs = llvm::sys::fs;
  if (path == "-") {
    llvm::outs() << contents;
    return flushed(llvm::outs(), path, diags);
  }
  fs::file_status status;
  const bool exists = !fs::status(path, status);
  if (exists && status.type() != fs::file_type::regular_file)
    return writeInPlace(path, contents, diags);
  // The rename replaces the file a symlink names, not the link.
  llvm::SmallString<256> target(path);
  if (exists) {
    llvm::SmallString<256> real;
    if (!fs::real_path(path, real))
      target = real;
  }
  // Beside the target, so that the rename stays on one file system.
  llvm::SmallString<256> model(llvm::sys::path::parent_path(target));
  llvm::sys::path::append(model, "." + llvm::sys::path::filename(target) + ".tmp-%%%%%%");
  llvm::Expected<fs::TempFile> temp = fs::TempFile::create(model);
  if (!temp) {
    const std::string reason = llvm::toString(temp.takeError());
    // A directory that takes no new files but a file there that may be
    // rewritten: the old way, in place.
    if (exists && fs::can_write(path))
      return writeInPlace(path, contents, diags);
    diags.fileError(path.str(), reason);
    return false;
  }
  bool ok;
  {
    llvm::raw_fd_ostream os(temp->FD, /*shouldClose=*/false);
    os << contents;
    ok = flushed(os, path, diags);
  }
  if (!ok) {
    llvm::consumeError(temp->discard());
    return false;
  }
  if (exists)
    (void)fs::setPermissions(temp->TmpName, status.permissions());
  if (llvm::Error e = temp->keep(target)) {
    diags.fileError(path.str(), llvm::toString(std::move(e)));
    return false;
  }
  return true;
}

} // namespace dmuon
