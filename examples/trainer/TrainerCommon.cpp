#include "TrainerCommon.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tiny {
namespace {

void usage(FILE *out, const TrainerInfo &info) {
  // Continuation lines line up under "--plan".
  const int indent = static_cast<int>(std::strlen("usage: ") + std::strlen(info.program) + 1);
  std::fprintf(out, "usage: %s --plan PLAN [--steps N] [--lr LR] [--adamw-lr LR]\n", info.program);
  std::fprintf(out, "%*s[--seed S] [--mode z2|z3] [--sync|--async]\n", indent, "");
  std::fprintf(out, "%*s[--warmup N] [--cosine] [--clip-grad-norm X] [--clip-policy P]\n",
               indent, "");
  std::fprintf(out, "%*s[--min-loss-drop F]%s\n", indent, "",
               info.cuda ? " [--device N] [--check-against-cpu]"
                         : " [--micro-batches K] [--accumulation local|reduce]");
  std::fprintf(out,
               "%s\n"
               "  --plan PLAN        plan compiled by dmuonc for this world size\n"
               "  --steps N          training steps (default 50)\n"
               "  --lr LR            Muon learning rate (default: the plan's)\n"
               "  --adamw-lr LR      AdamW learning rate (default: the plan's)\n"
               "  --seed S           seed of the initial params and the data (default 1)\n"
               "  --mode z2|z3       packed-buffer lifetime (default: the plan's)\n"
               "  --sync, --async    replicate broadcast after the step (default: the plan's)\n"
               "  --warmup N         linear learning-rate warmup over N steps (default 0)\n"
               "  --cosine           cosine learning-rate decay to 10%% by the last step\n"
               "  --clip-grad-norm X clip gradients to a global norm of X (default: none)\n"
               "  --clip-policy P    what X clips: adamw_only (default), all, none\n"
               "  --min-loss-drop F  fail unless the loss falls by at least F times\n",
               info.description);
  if (!info.cuda)
    std::fprintf(out,
                 "  --micro-batches K  accumulate gradients over K micro-batches per step\n"
                 "  --accumulation M   local (reduce once per step, default) or reduce\n");
  if (info.cuda)
    std::fprintf(out,
                 "  --device N         CUDA device of every rank (default: local rank %% devices)\n"
                 "  --check-against-cpu\n"
                 "                     also run step 0 on the CPU model (same params and batch);\n"
                 "                     fail unless the loss agrees to 1e-4 and every gradient\n"
                 "                     to 1e-3 (relative)\n");
}

// One command-line argument at a time: its name, and its value from
// "--name=value" or the next argument. Failures set `err`.
class FlagCursor {
public:
  FlagCursor(int argc, char **argv, std::string &err) : argc_(argc), argv_(argv), err_(err) {}

  // Moves to the next argument; false past the last.
  bool next() {
    if (++i_ >= argc_)
      return false;
    name_ = argv_[i_];
    value_.clear();
    hasInline_ = false;
    if (auto eq = name_.find('='); name_.rfind("--", 0) == 0 && eq != std::string::npos) {
      value_ = name_.substr(eq + 1);
      name_ = name_.substr(0, eq);
      hasInline_ = true;
    }
    return true;
  }

  bool is(const char *flag) const { return name_ == flag; }
  // A switch takes no "=value".
  bool isSwitch(const char *flag) const { return name_ == flag && !hasInline_; }
  const char *argument() const { return argv_[i_]; }

  bool value(std::string &out) {
    if (hasInline_) {
      out = value_;
      return true;
    }
    if (i_ + 1 >= argc_)
      return fail("missing value for " + name_);
    out = argv_[++i_];
    return true;
  }

  bool number(double &out) {
    std::string s;
    if (!value(s))
      return false;
    char *end = nullptr;
    out = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      return fail("invalid number '" + s + "' for " + name_);
    return true;
  }

  // A number that is a whole number in [lo, hi]; else `message`.
  bool wholeNumber(double lo, double hi, const char *message, double &out) {
    if (!number(out))
      return false;
    if (out < lo || out != std::floor(out) || out > hi)
      return fail(message);
    return true;
  }

  bool fail(const std::string &message) {
    err_ = message;
    return false;
  }

private:
  const int argc_;
  char **const argv_;
  int i_ = 0;
  std::string name_, value_;
  bool hasInline_ = false;
  std::string &err_;
};

// What one flag's parser made of the current argument.
enum class Parsed { Yes, Failed, NotMine };

Parsed parsedIf(bool ok) { return ok ? Parsed::Yes : Parsed::Failed; }

constexpr double kNoLimit = HUGE_VAL;

// The run's flags: plan, length, learning rates, seed, memory mode.
Parsed parseRunFlag(FlagCursor &c, TrainerFlags &f) {
  double d = 0;
  std::string s;
  if (c.is("--plan"))
    return parsedIf(c.value(f.plan));
  if (c.is("--steps")) {
    if (!c.wholeNumber(1, kNoLimit, "--steps must be a positive integer", d))
      return Parsed::Failed;
    f.steps = static_cast<int>(d);
    return Parsed::Yes;
  }
  if (c.is("--lr"))
    return parsedIf(c.number(f.lr));
  if (c.is("--adamw-lr"))
    return parsedIf(c.number(f.adamwLr));
  if (c.is("--seed")) {
    if (!c.wholeNumber(0, kNoLimit, "--seed must be a non-negative integer", d))
      return Parsed::Failed;
    f.seed = static_cast<uint64_t>(d);
    return Parsed::Yes;
  }
  if (c.is("--mode")) {
    if (!c.value(s))
      return Parsed::Failed;
    if (s == "z2")
      f.mode = DMUON_MODE_Z2;
    else if (s == "z3")
      f.mode = DMUON_MODE_Z3;
    else
      return parsedIf(c.fail("--mode must be z2 or z3, not '" + s + "'"));
    return Parsed::Yes;
  }
  if (c.isSwitch("--sync") || c.isSwitch("--async")) {
    f.replicateAsync = c.is("--async") ? 1 : 0;
    return Parsed::Yes;
  }
  if (c.is("--min-loss-drop"))
    return parsedIf(c.number(f.minLossDrop));
  return Parsed::NotMine;
}

// The schedule's flags: warmup, decay, gradient clipping.
Parsed parseScheduleFlag(FlagCursor &c, TrainerFlags &f) {
  double d = 0;
  std::string s;
  if (c.is("--warmup")) {
    if (!c.wholeNumber(0, 1e9, "--warmup must be a non-negative integer", d))
      return Parsed::Failed;
    f.warmup = static_cast<int>(d);
    return Parsed::Yes;
  }
  if (c.isSwitch("--cosine")) {
    f.cosine = true;
    return Parsed::Yes;
  }
  if (c.is("--clip-grad-norm")) {
    if (!c.number(f.clipGradNorm))
      return Parsed::Failed;
    if (!(f.clipGradNorm >= 0) || std::isinf(f.clipGradNorm))
      return parsedIf(c.fail("--clip-grad-norm must be a finite number >= 0"));
    return Parsed::Yes;
  }
  if (c.is("--clip-policy")) {
    if (!c.value(s))
      return Parsed::Failed;
    if (s == "adamw_only")
      f.clipPolicy = DMUON_CLIP_ADAMW_ONLY;
    else if (s == "all")
      f.clipPolicy = DMUON_CLIP_ALL;
    else if (s == "none")
      f.clipPolicy = DMUON_CLIP_NONE;
    else
      return parsedIf(c.fail("--clip-policy must be adamw_only, all or none, not '" + s + "'"));
    return Parsed::Yes;
  }
  return Parsed::NotMine;
}

// The host's own flags: micro-batches on the CPU trainer, the device on
// the CUDA one.
Parsed parseHostFlag(FlagCursor &c, const TrainerInfo &info, TrainerFlags &f) {
  double d = 0;
  std::string s;
  if (!info.cuda && c.is("--micro-batches")) {
    if (!c.wholeNumber(1, 1024, "--micro-batches must be a positive integer", d))
      return Parsed::Failed;
    f.microBatches = static_cast<int>(d);
    return Parsed::Yes;
  }
  if (!info.cuda && c.is("--accumulation")) {
    if (!c.value(s))
      return Parsed::Failed;
    if (s == "local")
      f.accumulation = DMUON_ACCUMULATION_LOCAL;
    else if (s == "reduce")
      f.accumulation = DMUON_ACCUMULATION_REDUCE;
    else
      return parsedIf(c.fail("--accumulation must be local or reduce, not '" + s + "'"));
    return Parsed::Yes;
  }
  if (info.cuda && c.is("--device")) {
    if (!c.wholeNumber(0, 1024, "--device must be a non-negative integer", d))
      return Parsed::Failed;
    f.device = static_cast<int>(d);
    return Parsed::Yes;
  }
  if (info.cuda && c.isSwitch("--check-against-cpu")) {
    f.checkAgainstCpu = true;
    return Parsed::Yes;
  }
  return Parsed::NotMine;
}

bool parseFlags(int argc, char **argv, const TrainerInfo &info, TrainerFlags &f,
                std::string &err) {
  FlagCursor c(argc, argv, err);
  while (c.next()) {
    if (c.is("--help") || c.is("-h")) {
      usage(stdout, info);
      std::exit(0);
    }
    Parsed r = parseRunFlag(c, f);
    if (r == Parsed::NotMine)
      r = parseScheduleFlag(c, f);
    if (r == Parsed::NotMine)
      r = parseHostFlag(c, info, f);
    if (r == Parsed::Failed)
      return false;
    if (r == Parsed::NotMine)
      return c.fail("unknown argument '" + std::string(c.argument()) + "'");
  }
  if (f.plan.empty()) {
    err = "--plan is required";
    return false;
  }
  return true;
}

const char *kCollectiveNames[] = {"broadcast", "reduce",    "replicate",     "allreduce",
                                  "gather",    "scatter",   "allgather",     "reduce_scatter"};
static_assert(sizeof kCollectiveNames / sizeof kCollectiveNames[0] == DMUON_COLLECTIVE_COUNT,
              "a name for every collective kind");

std::string human(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

} // namespace

int trainerMain(int argc, char **argv, const TrainerInfo &info, TrainerRun run) {
  std::unique_ptr<World> world;
  try {
    world = openWorld(/*alwaysMpi=*/!info.cuda, &argc, &argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", info.program, e.what());
    return 1;
  }

  TrainerFlags flags;
  std::string err;
  if (!parseFlags(argc, argv, info, flags, err)) {
    if (world->rank() == 0) {
      std::fprintf(stderr, "%s: error: %s\n", info.program, err.c_str());
      usage(stderr, info);
    }
    return 2;
  }

  int rc = 1;
  try {
    rc = run(flags, *world);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", info.program, world->rank(), e.what());
    std::fflush(stderr);
    world->abort(1);
  }
  return rc;
}

int64_t localBatch(const Config &cfg, int world) {
  if (cfg.globalBatch % world != 0)
    throw std::runtime_error("the global batch (" + std::to_string(cfg.globalBatch) +
                             ") does not split evenly over " + std::to_string(world) + " ranks");
  return cfg.globalBatch / world;
}

dmuon_runtime_options_t runtimeOptions(const TrainerFlags &flags) {
  dmuon_runtime_options_t opt;
  dmuon_runtime_options_init(&opt);
  opt.mode = flags.mode;
  opt.replicate_async = flags.replicateAsync;
  opt.lr = flags.lr;
  opt.adamw_lr = flags.adamwLr;
  opt.accumulation = flags.accumulation;
  opt.max_grad_norm = flags.clipGradNorm;
  opt.clip_policy = flags.clipPolicy;
  return opt;
}

void printRunHeader(const TrainerInfo &info, const TrainerFlags &flags, const dmuon::Plan &plan,
                    const Config &cfg, const World &world, int64_t localBatch,
                    const std::string &extra) {
  if (world.rank() == 0)
    std::printf("%s: %s, %d ranks, %d params (%d hook groups), global batch %" PRId64
                " (%" PRId64 " per rank), %d steps%s\n",
                info.program, flags.plan.c_str(), world.size(), plan.numParams(), plan.numHookGroups(),
                cfg.globalBatch, localBatch, flags.steps, extra.c_str());
}

double lrFactor(const TrainerFlags &flags, int step) {
  if (step < flags.warmup)
    return static_cast<double>(step + 1) / flags.warmup;
  if (!flags.cosine)
    return 1.0;
  const int span = std::max(1, flags.steps - 1 - flags.warmup);
  const double t = std::min(1.0, static_cast<double>(step - flags.warmup) / span);
  return 0.1 + 0.45 * (1.0 + std::cos(M_PI * t));
}

double stepAndReport(dmuon::Runtime &rt, const TrainerFlags &flags,
                     const dmuon_hyper_params_t &base, int step, float mine, World &world) {
  if (flags.warmup > 0 || flags.cosine) {
    dmuon_hyper_params_t h;
    dmuon_hyper_params_init(&h);
    h.lr = base.lr * lrFactor(flags, step);
    h.adamw_lr = base.adamw_lr * lrFactor(flags, step);
    rt.setHyperParams(h);
  }
  const bool applied = rt.step();
  const dmuon_grad_norm_t norm = rt.gradNorm();
  // Slices are equal, so the mean of the ranks' means is the global mean.
  double sum = mine;
  world.sum(&sum, 1);
  const double loss = sum / world.size();
  if (world.rank() == 0) {
    std::printf("step %4d  loss %.6f  grad-norm %.4f", step, loss, norm.total);
    if (!applied)
      std::printf("  skipped (non-finite gradient)");
    else if (norm.clip_coef < 1)
      std::printf("  clipped x%.3f", norm.clip_coef);
    std::printf("\n");
    std::fflush(stdout);
  }
  return loss;
}

int finishRun(const TrainerInfo &info, const TrainerFlags &flags, dmuon::Runtime &rt,
              World &world, double first, double last) {
  const int rank = world.rank();
  // Per-rank figures, printed by rank 0 in rank order.
  dmuon_comm_counters_t c = rt.commCounters();
  std::vector<double> mineFig;
  mineFig.push_back(rt.nsFlops());
  for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
    mineFig.push_back(static_cast<double>(c.kinds[k].sent));
  for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
    mineFig.push_back(static_cast<double>(c.kinds[k].received));
  const int n = static_cast<int>(mineFig.size());
  std::vector<double> all(rank == 0 ? static_cast<size_t>(n * world.size()) : 0);
  world.gather(mineFig.data(), n, all.data());
  if (rank == 0) {
    std::printf("loss: %.6f -> %.6f (%.1fx lower) over %d steps\n", first, last,
                last > 0 ? first / last : INFINITY, flags.steps);
    std::printf("per rank over %d steps (NS work; bytes sent / received by collective):\n",
                flags.steps);
    std::printf("%-5s %12s", "rank", "ns_flops");
    for (const char *name : kCollectiveNames)
      std::printf(" %23s", name);
    std::printf(" %23s\n", "total");
    for (int r = 0; r < world.size(); ++r) {
      const double *f = &all[static_cast<size_t>(r * n)];
      std::printf("%-5d %12.4g", r, f[0]);
      double sent = 0, recv = 0;
      for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
        std::string cell = human(f[1 + k]) + " / " + human(f[1 + DMUON_COLLECTIVE_COUNT + k]);
        std::printf(" %23s", cell.c_str());
        sent += f[1 + k];
        recv += f[1 + DMUON_COLLECTIVE_COUNT + k];
      }
      std::string cell = human(sent) + " / " + human(recv);
      std::printf(" %23s\n", cell.c_str());
    }
  }

  int ok = 1;
  if (flags.minLossDrop > 0 && !(last > 0 && first / last >= flags.minLossDrop)) {
    ok = 0;
    if (rank == 0)
      std::fprintf(stderr, "%s: error: the loss fell %.2fx, less than --min-loss-drop %g\n",
                   info.program, last > 0 ? first / last : 0.0, flags.minLossDrop);
  }
  return ok ? 0 : 1;
}

} // namespace tiny
