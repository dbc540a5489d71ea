// The tools' output files: an output that is one of the run's inputs is
// refused before anything is written, and an output is written whole or not
// at all (a temporary file beside it, renamed over it once every byte is
// out), so a failed run leaves the previous file as it was.
#ifndef DMUON_SUPPORT_OUTPUTFILE_H
#define DMUON_SUPPORT_OUTPUTFILE_H

#include "support/Diagnostics.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace dmuon {

// True when `a` and `b` name one file: for existing files the same device and
// inode (a symlink, a hard link or another spelling such as "./x"); where
// one does not exist yet, the same absolute path without "." and "..".
bool sameFile(llvm::StringRef a, llvm::StringRef b);

// An input of the run, for the output check: its path as given ("-" and ""
// are never files).
struct RunInput {
  std::string path;
  std::string what; // "the model", "--cost-table", ... for the message
};

// Reports "<tool>: error: output '<output>' is the input '<input>' (<what>)"
// and returns false when `output` is one of `inputs`; "-" is never an input.
bool checkOutputIsNotInput(llvm::StringRef output, llvm::ArrayRef<RunInput> inputs,
                           Diagnostics &diags);

// Writes `contents` to `path` ("-": stdout). A regular file (or a
// new one) is written to a temporary file in its directory, renamed over it
// when the write succeeded; a device or a pipe (/dev/null, /dev/full, a
// FIFO) is written in place. On a write error (a full disk, /dev/full, a
// closed pipe) reports "<tool>: error: '<path>': <reason>", leaves the old
// file untouched, and returns false.
bool writeOutputFile(llvm::StringRef path, llvm::StringRef contents, Diagnostics &diags);

} // namespace dmuon

#endif
