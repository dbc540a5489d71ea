#include "StepBenchFlags.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <type_traits>

namespace step_bench {
namespace {

bool parseInt(const char *s, int64_t &out) {
  char *end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0')
    return false;
  out = v;
  return true;
}

bool parseDouble(const char *s, double &out) {
  char *end = nullptr;
  out = std::strtod(s, &end);
  return end != s && *end == '\0';
}

} // namespace

void printStepBenchUsage(FILE *out) {
  std::fprintf(out, R"(usage: mpirun -n N dmuon_step_bench [options]

Times one training step, phase by phase, of four variants on the same model,
ranks and batches, taking turns: AdamW through dmuon, Muon through dmuon, and
two naive Muon baselines (all-reduce + redundant NS; ZeRO-1 gather +
redundant NS, Moonlight's Distributed Muon).

  --model gpt|llama-shaped  examples/gpt's GPT (default) or the Llama 3.1 8B-
                            shaped model scaled down (bench/step/LlamaShapedModel.h)
  --layers N --context T --hidden D --heads H
                            model sizes (GPT: d_model; both: blocks, context)
  --kv-heads H --ffn F --vocab V
                            llama-shaped only (defaults 1, 896, 1024)
  --batch B                 global batch in windows (default 16)
  --warmup N                untimed steps per variant first (default 2)
  --steps N                 timed steps per variant (default 10)
  --rounds R                the variants take turns R times (default 2)
  --mesh M                  dmuonc mesh (default: the world size)
  --mode z2|z3              dmuon's mode (default z3)
  --seed S --threads N      init/data seed; libtorch threads per rank (1)
  --work DIR                manifests and plans (default step-bench-work)
  --dmuonc PATH             plan compiler (default: the build's)
  --expect-agree RTOL       exit 1 unless both baselines' last loss equals
                            dmuon Muon's within RTOL (relative)
)");
}

bool parseStepBenchFlags(int argc, char **argv, StepBenchFlags &f, std::string &err) {
  using IntSetter = std::function<bool(int64_t)>;
  auto positive = [](auto &field) {
    return IntSetter([&field](int64_t v) {
      field = static_cast<std::remove_reference_t<decltype(field)>>(v);
      return v > 0;
    });
  };
  const std::map<std::string, IntSetter> ints = {
      {"--layers", [&](int64_t v) { f.gpt.layers = f.llama.layers = v; return v > 0; }},
      {"--context", [&](int64_t v) { f.gpt.context = f.llama.context = v; return v > 1; }},
      {"--hidden", [&](int64_t v) { f.gpt.dModel = f.llama.hidden = v; return v > 0; }},
      {"--heads", [&](int64_t v) { f.gpt.heads = f.llama.heads = v; return v > 0; }},
      {"--kv-heads", positive(f.llama.kvHeads)},
      {"--ffn", positive(f.llama.ffn)},
      {"--vocab", positive(f.llama.vocab)},
      {"--batch", positive(f.globalBatch)},
      {"--warmup", [&](int64_t v) { f.warmup = int(v); return v >= 0; }},
      {"--steps", positive(f.steps)},
      {"--rounds", positive(f.rounds)},
      {"--threads", positive(f.threads)},
      {"--seed", [&](int64_t v) { f.seed = uint64_t(v); return v >= 0; }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      printStepBenchUsage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      err = "unknown option or missing value: " + arg;
      return false;
    }
    const char *value = argv[++i];
    if (auto it = ints.find(arg); it != ints.end()) {
      int64_t v = 0;
      if (!parseInt(value, v) || !it->second(v)) {
        err = "bad value for " + arg + ": " + value;
        return false;
      }
    } else if (arg == "--model") {
      if (std::strcmp(value, "gpt") == 0)
        f.model = ModelKind::Gpt;
      else if (std::strcmp(value, "llama-shaped") == 0)
        f.model = ModelKind::LlamaShaped;
      else {
        err = std::string("--model must be gpt or llama-shaped, not ") + value;
        return false;
      }
    } else if (arg == "--mode") {
      if (std::strcmp(value, "z2") != 0 && std::strcmp(value, "z3") != 0) {
        err = std::string("--mode must be z2 or z3, not ") + value;
        return false;
      }
      f.mode = value[1] == '2' ? DMUON_MODE_Z2 : DMUON_MODE_Z3;
    } else if (arg == "--expect-agree") {
      if (!parseDouble(value, f.expectAgree) || f.expectAgree < 0) {
        err = std::string("bad value for --expect-agree: ") + value;
        return false;
      }
    } else if (arg == "--mesh") {
      f.mesh = value;
    } else if (arg == "--work") {
      f.work = value;
    } else if (arg == "--dmuonc") {
      f.dmuonc = value;
    } else {
      err = "unknown option: " + arg;
      return false;
    }
  }
  if (f.steps < f.rounds) {
    err = "--steps must be at least --rounds";
    return false;
  }
  return true;
}

} // namespace step_bench
