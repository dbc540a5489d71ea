// A main for the fuzz entry points where libFuzzer is not linked (gcc, or a
// build without DMUON_BUILD_FUZZERS): runs LLVMFuzzerTestOneInput once on each
// file named, or on each file in each directory named, and reports how many
// ran. A crash or sanitizer report fails the run as it would under libFuzzer.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

static bool runFile(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read '%s'\n", p.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy of exactly the input's size, so that ASan sees reads past its end.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
  return true;
}

int main(int argc, char **argv) {
  size_t runs = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto &e : fs::recursive_directory_iterator(arg, ec))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.')
          files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path &f : files) {
        ok &= runFile(f);
        ++runs;
      }
    } else {
      ok &= runFile(arg);
      ++runs;
    }
  }
  std::printf("replay: ran %zu inputs\n", runs);
  return ok ? 0 : 1;
}
