// dmuon-calibrate's command line (tools/calibrate/Calibrate.cpp).
#ifndef DMUON_TOOLS_CALIBRATE_CALIBRATEFLAGS_H
#define DMUON_TOOLS_CALIBRATE_CALIBRATEFLAGS_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::calibrate {

struct Flags {
  std::string out = "-", nsTable, plan, name;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  int repeats = 10;
  int nsSteps = 5;
  int64_t maxBytes = int64_t(16) << 20;
  int64_t devicesPerNode = 0; // 0: the ranks sharing this node's memory
  int64_t processors = 0;     // 0: the OS's count of online processors
};

void usage(FILE *f);
// Parses argv into `f`; false with `err` set on a bad option or value.
// -h/--help prints the usage and exits.
bool parseFlags(int argc, char **argv, Flags &f, std::string &err);

} // namespace dmuon::calibrate

#endif
