#include "GptFlags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

namespace gpt {
namespace {

// Parses a whole string as a number; false on trailing garbage.
bool toDouble(const std::string &s, double &out) {
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0';
}

template <typename Int> bool toInt(const std::string &s, Int &out, double min) {
  double d;
  if (!toDouble(s, d) || d < min || d != double(Int(d)))
    return false;
  out = Int(d);
  return true;
}

bool oneOf(const std::string &s, std::string &out, std::initializer_list<const char *> allowed) {
  for (const char *a : allowed)
    if (s == a) {
      out = s;
      return true;
    }
  return false;
}

} // namespace

void printGptUsage(FILE *out) {
  std::fprintf(out, "%s",
               "usage: dmuon-gpt [flags]   (under mpirun for --backend dmuon)\n"
               "Trains a small byte-level GPT on Debian's fortune databases.\n"
               "  --backend dmuon|reference   libdmuon over MPI (default), or one process\n"
               "                              with torch::optim::AdamW and a libtorch Muon\n"
               "  --optimizer muon|normuon|soap|shampoo|adamw\n"
               "                              the rule of dmuonc's default matrices (muon;\n"
               "                              the reference backend: muon or adamw), or\n"
               "                              AdamW for every param\n"
               "  --mesh M                    dmuonc mesh (default: the world size, 1-D)\n"
               "  --mode z2|z3                packed buffers kept / freed after forward (z3)\n"
               "  --steps N (300)  --seed S (1)  --batch B (global windows per step, 16)\n"
               "  --context T (64)  --d-model D (128)  --layers L (4)  --heads H (4)\n"
               "  --lr LR (Muon, 0.02)  --momentum MU (0.95)  --weight-decay WD (0)\n"
               "  --adamw-lr LR (1e-3)  --adamw-weight-decay WD (0)\n"
               "  --warmup N                  linear warmup of both learning rates (0)\n"
               "  --eval-every K (25)  --val-windows N (64)  --threads N (1 per process)\n"
               "  --data DIR (/usr/share/games/fortunes)\n"
               "  --work DIR                  where the manifest and plan go (gpt-work)\n"
               "  --out DIR                   write loss.csv and the final params.pt\n"
               "  --compare-to DIR            fail unless every step's loss and every final\n"
               "                              param equals that run's within --rtol (1e-4)\n"
               "  --expect-val-drop           fail unless the validation loss fell\n"
               "  --dmuonc PATH               the planning compiler (default: the build's)\n"
               "  --dmuonc-arg ARG            one more dmuonc flag (repeatable), e.g.\n"
               "                              --dmuonc-arg='--ns-split=\\.(q|k|v)\\.weight$=4'\n"
               "                              to orthogonalize q, k and v per head\n");
}

bool parseGptFlags(int argc, char **argv, GptFlags &f, std::string &err) {
  using Setter = std::function<bool(const std::string &)>;
  GptConfig &m = f.model;
  const std::map<std::string, Setter> valued = {
      {"--backend", [&](auto &s) { return oneOf(s, f.backend, {"dmuon", "reference"}); }},
      {"--optimizer",
       [&](auto &s) {
         return oneOf(s, f.optimizer, {"muon", "normuon", "soap", "shampoo", "adamw"});
       }},
      {"--mesh", [&](auto &s) { return f.mesh = s, !s.empty(); }},
      {"--mode",
       [&](auto &s) {
         f.mode = s == "z2" ? DMUON_MODE_Z2 : DMUON_MODE_Z3;
         return s == "z2" || s == "z3";
       }},
      {"--steps", [&](auto &s) { return toInt(s, f.steps, 1); }},
      {"--seed", [&](auto &s) { return toInt(s, f.seed, 0); }},
      {"--batch", [&](auto &s) { return toInt(s, f.globalBatch, 1); }},
      {"--context", [&](auto &s) { return toInt(s, m.context, 2); }},
      {"--d-model", [&](auto &s) { return toInt(s, m.dModel, 1); }},
      {"--layers", [&](auto &s) { return toInt(s, m.layers, 1); }},
      {"--heads", [&](auto &s) { return toInt(s, m.heads, 1); }},
      {"--lr", [&](auto &s) { return toDouble(s, f.lr); }},
      {"--momentum", [&](auto &s) { return toDouble(s, f.momentum); }},
      {"--weight-decay", [&](auto &s) { return toDouble(s, f.weightDecay); }},
      {"--adamw-lr", [&](auto &s) { return toDouble(s, f.adamwLr); }},
      {"--adamw-weight-decay", [&](auto &s) { return toDouble(s, f.adamwWeightDecay); }},
      {"--eval-every", [&](auto &s) { return toInt(s, f.evalEvery, 1); }},
      {"--warmup", [&](auto &s) { return toInt(s, f.warmup, 0); }},
      {"--val-windows", [&](auto &s) { return toInt(s, f.valWindows, 1); }},
      {"--threads", [&](auto &s) { return toInt(s, f.threads, 1); }},
      {"--data", [&](auto &s) { return f.data = s, true; }},
      {"--work", [&](auto &s) { return f.work = s, !s.empty(); }},
      {"--out", [&](auto &s) { return f.out = s, true; }},
      {"--compare-to", [&](auto &s) { return f.compareTo = s, true; }},
      {"--rtol", [&](auto &s) { return toDouble(s, f.rtol) && f.rtol >= 0; }},
      {"--dmuonc", [&](auto &s) { return f.dmuonc = s, true; }},
      {"--dmuonc-arg", [&](auto &s) { return f.dmuoncArgs.push_back(s), !s.empty(); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    if (a == "--help" || a == "-h") {
      printGptUsage(stdout);
      std::exit(0);
    }
    if (a == "--expect-val-drop") {
      f.expectValDrop = true;
      continue;
    }
    bool inlineValue = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inlineValue = true;
    }
    auto it = valued.find(a);
    if (it == valued.end()) {
      err = "unknown argument '" + std::string(argv[i]) + "'";
      return false;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) {
        err = "missing value for " + a;
        return false;
      }
      value = argv[++i];
    }
    if (!it->second(value)) {
      err = "invalid value '" + value + "' for " + a;
      return false;
    }
  }
  return true;
}

} // namespace gpt
