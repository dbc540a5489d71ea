// What dmuonc and dmuon-plan share around LLVM's Support library: command
// line errors in the tools' "<tool>: error: ..." form, and closed pipes as
// write errors. Their output files are support/OutputFile.h's.
#ifndef DMUON_TOOLS_TOOLSUPPORT_H
#define DMUON_TOOLS_TOOLSUPPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <cstdio>
#include <string>
#include <unistd.h>

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
// Broken pipe" and status 1 (support/OutputFile.h), instead of InitLLVM's silent exit
// with status 74. Call after InitLLVM.
inline void treatBrokenPipeAsWriteError() {
  llvm::sys::SetOneShotPipeSignalFunction(nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

} // namespace dmuon::tools

#endif
