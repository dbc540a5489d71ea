// What dmuonc and dmuon-plan share around LLVM's Support library: command
// line errors in the tools' "<tool>: error: ..." form, and output files whose
// write errors end the tool with a message instead of LLVM's crash banner.
#ifndef DMUON_TOOLS_TOOLSUPPORT_H
#define DMUON_TOOLS_TOOLSUPPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#endif

namespace dmuon::tools {

// Rewrites LLVM's "<tool>: message" lines as "<tool>: error: message" (its
// suggestions, "Did you mean ...", as notes); other lines are kept.
inline std::string withErrorPrefix(llvm::StringRef text, llvm::StringRef tool) {
  std::string out;
  const std::string prefix = tool.str() + ": ";
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    if (line.startswith(prefix) && !line.substr(prefix.size()).startswith("error: ")) {
      llvm::StringRef message = line.substr(prefix.size());
      out += prefix + (message.startswith("Did you mean") ? "note: " : "error: ") + message.str();
    } else {
      out += line.str();
    }
    out += '\n';
  }
  return out;
}

// cl::ParseCommandLineOptions, with every error it prints in the tools' form
// and exit status 1. LLVM prints some errors to the stream it is given and
// others (an option's bad or missing value) straight to llvm::errs(), so
// stderr is caught in a temporary file while it parses.
inline void parseCommandLine(int argc, char **argv, llvm::StringRef overview,
                             llvm::StringRef tool) {
  std::string given;
  llvm::raw_string_ostream givenStream(given);
  llvm::errs().flush();
  FILE *caught = std::tmpfile();
  const int savedStderr = caught ? ::dup(STDERR_FILENO) : -1;
  const bool redirected = savedStderr >= 0 && ::dup2(::fileno(caught), STDERR_FILENO) >= 0;
  const bool ok = llvm::cl::ParseCommandLineOptions(argc, argv, overview, &givenStream);
  llvm::errs().flush();
  std::string direct;
  if (redirected) {
    ::dup2(savedStderr, STDERR_FILENO);
    std::rewind(caught);
    char chunk[4096];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, caught)) > 0 && direct.size() < (1u << 20))
      direct.append(chunk, n);
  }
  if (savedStderr >= 0)
    ::close(savedStderr);
  if (caught)
    std::fclose(caught);
  llvm::errs() << withErrorPrefix(direct, tool) << withErrorPrefix(givenStream.str(), tool);
  if (!ok)
    std::exit(1);
}

// A closed pipe is a write error like any other: "<tool>: error: '-':
// Broken pipe" and status 1 (keepOutput), instead of InitLLVM's silent exit
// with status 74. Call after InitLLVM.
inline void treatBrokenPipeAsWriteError() {
  llvm::sys::SetOneShotPipeSignalFunction(nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

// Backs the heap with transparent huge pages where the kernel offers them
// (its "madvise" mode), as glibc's `glibc.malloc.hugetlb=1` tunable does. A
// large compile allocates a few hundred MB of objects (Kimi K2: 70k params;
// 1M params: 1.5 GB), and on a small VM the first touch of each 4 KiB page
// cost a third of the run (docs/benchmarks.md, "dmuonc on the largest
// inputs"). The reserve is address space only, pages are touched on use:
// up to 2 GiB (M_TOP_PAD's int range), half the machine's memory at most.
// Large blocks come from the heap as well, so memory freed by one pass is
// reused by the next instead of being unmapped and faulted in again. The
// probe that extends the heap is one small block: with MALLOC_PERTURB_ set
// (the GPT example's tests) glibc writes every block it hands out or takes
// back, and a reserve-sized probe would touch all of it. Call first in
// main().
inline void preferHugePageHeap() {
#if defined(__linux__) && defined(__GLIBC__)
  constexpr size_t kHugePage = size_t{2} << 20;
  constexpr size_t kMaxReserve = (size_t{2} << 30) - kHugePage, kMinReserve = size_t{256} << 20;
  const long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  size_t reserve = pages > 0 && pageSize > 0
                       ? static_cast<size_t>(pages) / 2 * static_cast<size_t>(pageSize)
                       : kMinReserve;
  reserve = std::clamp(reserve, kMinReserve, kMaxReserve) & ~(kHugePage - 1);
  // Trimming off: the first free() next to the reserve would hand back all
  // of it past M_TOP_PAD.
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, -1) != 1 ||
      mallopt(M_TOP_PAD, static_cast<int>(reserve)) != 1)
    return; // another allocator (a sanitizer's): leave it alone
  auto *before = static_cast<char *>(sbrk(0));
  // One block larger than what is free extends the heap by it plus the pad.
  void *probe = malloc(kHugePage);
  asm volatile("" : : "r"(probe) : "memory"); // keep the compiler from eliding the pair
  auto *after = static_cast<char *>(sbrk(0));
  free(probe);
  mallopt(M_TOP_PAD, 64 << 20); // past the reserve, grow 64 MB at a time
  if (before == reinterpret_cast<char *>(-1) || after <= before)
    return;
  const auto begin = (reinterpret_cast<uintptr_t>(before) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = reinterpret_cast<uintptr_t>(after) & ~(kHugePage - 1);
  if (end > begin)
    madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE); // a hint: ignore errors
#endif
}

// Flushes `out` and keeps it; on a write error (a full disk, /dev/full, a
// closed pipe) prints "<tool>: error: '<path>': <reason>" and returns false,
// and the file is removed. raw_fd_ostream would otherwise abort the tool at
// exit over an error nobody looked at.
inline bool keepOutput(llvm::ToolOutputFile &out, llvm::StringRef path, llvm::StringRef tool) {
  out.os().flush();
  if (out.os().has_error()) {
    llvm::WithColor::error(llvm::errs(), tool)
        << "'" << path << "': " << out.os().error().message() << "\n";
    out.os().clear_error();
    return false;
  }
  out.keep();
  return true;
}

} // namespace dmuon::tools

#endif
