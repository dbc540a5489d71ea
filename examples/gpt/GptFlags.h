// dmuon-gpt's command line.
#ifndef DMUON_EXAMPLES_GPT_GPTFLAGS_H
#define DMUON_EXAMPLES_GPT_GPTFLAGS_H

#include "GptModel.h"

#include "dmuon/dmuon.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct GptFlags {
  std::string backend = "dmuon";  // dmuon | reference (one process, libtorch only)
  std::string optimizer = "muon"; // muon (dmuonc's select) | adamw (every param)
  std::string mesh;               // dmuon: dmuonc's --mesh; default: the world size
  dmuon_mode_t mode = DMUON_MODE_Z3;
  int steps = 300;
  uint64_t seed = 1;
  int64_t globalBatch = 16; // windows per step, split evenly over the ranks
  GptConfig model;
  double lr = 0.02, momentum = 0.95, weightDecay = 0.0; // Muon
  double adamwLr = 1e-3, adamwWeightDecay = 0.0;
  int evalEvery = 25;
  int warmup = 0; // linear learning-rate warmup steps (both optimizers)
  int64_t valWindows = 64;
  int threads = 1; // libtorch intra-op threads per process
  std::string data;
  std::string work = "gpt-work"; // manifest and plan
  std::string out;               // loss.csv, params.pt
  std::string compareTo;         // a reference run's --out
  double rtol = 1e-4;
  bool expectValDrop = false;
  std::string dmuonc;
  std::vector<std::string> dmuoncArgs; // --dmuonc-arg, passed on to dmuonc as given
};

// Parses argv; on --help prints usage and exits 0; on an error fills `err`.
bool parseGptFlags(int argc, char **argv, GptFlags &flags, std::string &err);
void printGptUsage(FILE *out);

} // namespace gpt

#endif
