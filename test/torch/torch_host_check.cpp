// dmuon::torch with models as users write them in libtorch, over MPI: a conv
// net with a root param and a frozen layer, and an LM with a tied embedding
// and a fused qkv, each trained 3 steps through ParamBridge and
// DmuonOptimizer (torch::optim::StepLR halving the rates every step) against
// a reference written here from torch ops (Newton-Schulz 5 Muon on the
// plan's matrices, conv weights as [out, in*k*k], the qkv as its three
// blocks; torch::optim::AdamW on the rest) that runs every rank's chunk in
// one process. Checked: every param after step 1 within 1e-5 relative, every
// loss within 1e-4, the scheduled rates reach the runtime, the frozen layer
// does not move; then each misuse of the bridge is refused with its message
// and abandonStep() lets the run go on.
//
// usage: mpirun -n 2 torch_host_check DMUONC WORK_DIR
#include "dmuon/torch/DmuonOptimizer.h"

#include <mpi.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace {

using dmuon_torch::kRootGroup;
using Hooks = std::function<torch::Tensor(const std::string &, std::function<torch::Tensor()>)>;
constexpr int kGlobalBatch = 8, kSteps = 3;
constexpr double kLr = 0.02, kAdamwLr = 1e-3;

// The rate factor at each step under torch::optim::StepLR(opt, 1, 0.5):
// libtorch's first scheduler step keeps the rates, every later one halves.
double stepLrScale(int step) { return std::pow(0.5, std::max(0, step - 1)); }

// A hook-free forward: the reference's, and the replica's.
torch::Tensor plain(const std::string &, std::function<torch::Tensor()> f) { return f(); }

struct ConvNet : torch::nn::Module {
  ConvNet() {
    scale = register_parameter("scale", torch::ones({1}));
    stem = register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 2; ++i)
      blocks->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3).padding(1)));
    frozen = register_module("frozen", torch::nn::Linear(8, 8));
    for (auto &p : frozen->parameters())
      p.set_requires_grad(false);
    head = register_module("head", torch::nn::Linear(8, 10));
  }
  torch::Tensor forward(torch::Tensor x, const Hooks &hook) {
    return hook(kRootGroup, [&] {
      x = hook("stem", [&] { return torch::gelu(stem(x)); });
      for (size_t i = 0; i < blocks->size(); ++i)
        x = hook("blocks." + std::to_string(i),
                 [&] { return x + torch::gelu(blocks->at<torch::nn::Conv2dImpl>(i).forward(x)); });
      x = hook("frozen", [&] { return frozen(x.mean({2, 3})); });
      return hook("head", [&] { return head(x) * scale; });
    });
  }
  torch::Tensor scale;
  torch::nn::Conv2d stem{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear frozen{nullptr}, head{nullptr};
};

struct Attention : torch::nn::Module {
  Attention() {
    qkv = register_module("qkv", torch::nn::Linear(32, 96));
    proj = register_module("proj", torch::nn::Linear(32, 32));
  }
  // Each Linear is a hook group of its own (dmuonc's default: a param's
  // parent module when no repeated block holds it).
  torch::Tensor forward(const torch::Tensor &x, const Hooks &hook) {
    auto parts = hook("attn.qkv", [&] { return qkv(x); }).chunk(3, -1);
    auto att = torch::softmax(
        torch::matmul(parts[0], parts[1].transpose(-1, -2)) / std::sqrt(32.0), -1);
    return x + hook("attn.proj", [&] { return proj(torch::matmul(att, parts[2])); });
  }
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};

// An output head over the embedding's weight (tie_word_embeddings).
struct TiedHead : torch::nn::Module {
  explicit TiedHead(const torch::Tensor &w) { weight = register_parameter("weight", w); }
  torch::Tensor weight;
};

struct TiedLm : torch::nn::Module {
  TiedLm() {
    wte = register_module("wte", torch::nn::Embedding(64, 32));
    torch::NoGradGuard g;
    wte->weight.normal_(0, 0.02);
    attn = register_module("attn", std::make_shared<Attention>());
    lm_head = register_module("lm_head", std::make_shared<TiedHead>(wte->weight));
  }
  // The tied weight's group ("wte") stays open until its last use, the head.
  torch::Tensor forward(const torch::Tensor &tokens, const Hooks &hook) {
    return hook("wte", [&] {
      torch::Tensor x = wte(tokens);
      x = attn->forward(x, hook);
      return torch::nn::functional::linear(x, lm_head->weight);
    });
  }
  torch::nn::Embedding wte{nullptr};
  std::shared_ptr<Attention> attn;
  std::shared_ptr<TiedHead> lm_head;
};

// ------------------------------------------------------------- reference

torch::Tensor newtonSchulz5(const torch::Tensor &g) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  torch::Tensor x = g / (g.norm() + 1e-7);
  const bool tall = g.size(0) > g.size(1);
  if (tall)
    x = x.t();
  for (int i = 0; i < 5; ++i) {
    torch::Tensor A = x.matmul(x.t());
    x = a * x + (b * A + c * A.matmul(A)).matmul(x);
  }
  return tall ? x.t() : x;
}

torch::Tensor orthogonalized(const std::string &name, const torch::Tensor &u) {
  torch::Tensor m = u.dim() > 2 ? u.reshape({u.size(0), -1}) : u; // a conv weight's matrix
  auto scaled = [](const torch::Tensor &block) {
    return newtonSchulz5(block) * std::sqrt(std::max(1.0, double(block.size(0)) / block.size(1)));
  };
  if (name.size() >= 10 && name.compare(name.size() - 10, 10, "qkv.weight") == 0)
    return torch::cat({scaled(m.chunk(3, 0)[0]), scaled(m.chunk(3, 0)[1]),
                       scaled(m.chunk(3, 0)[2])}, 0);
  return scaled(m).reshape(u.sizes());
}

template <typename Model>
std::map<std::string, torch::Tensor> values(Model &m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto &np : m.named_parameters())
    out[np.key()] = np.value().detach().clone();
  return out;
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> afterFirst, final;
};

// ----------------------------------------------------------------- runs

template <typename Model, typename Batch, typename Loss>
Run runReference(const std::set<std::string> &matrices, int world, Batch batch, Loss lossOf) {
  torch::manual_seed(0);
  Model model;
  std::vector<torch::Tensor> adamwParams;
  std::vector<std::pair<std::string, torch::Tensor>> muon;
  std::set<const c10::TensorImpl *> seen;
  for (const auto &np : model.named_parameters()) {
    if (!np.value().requires_grad() || !seen.insert(np.value().unsafeGetTensorImpl()).second)
      continue;
    if (matrices.count(np.key()))
      muon.emplace_back(np.key(), np.value());
    else
      adamwParams.push_back(np.value());
  }
  torch::optim::AdamW adamw(adamwParams, torch::optim::AdamWOptions(kAdamwLr).weight_decay(0));
  std::map<std::string, torch::Tensor> momentum;
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    const double scale = stepLrScale(step);
    double total = 0;
    for (int k = 0; k < world; ++k) {
      torch::Tensor loss = lossOf(model, batch(step, k, world), Hooks(plain)) / world;
      loss.backward();
      total += loss.item<double>();
    }
    torch::NoGradGuard noGrad;
    for (auto &[name, p] : muon) {
      torch::Tensor &buf = momentum.try_emplace(name, torch::zeros_like(p)).first->second;
      buf.mul_(0.95).add_(p.grad());
      p.sub_(orthogonalized(name, p.grad() + 0.95 * buf) * (kLr * scale));
      p.mutable_grad() = torch::Tensor();
    }
    static_cast<torch::optim::AdamWOptions &>(adamw.param_groups()[0].options()).lr(kAdamwLr * scale);
    adamw.step();
    adamw.zero_grad();
    run.losses.push_back(total);
    if (step == 0)
      run.afterFirst = values(model);
  }
  run.final = values(model);
  return run;
}

std::string compilePlan(torch::nn::Module &model, const std::string &name,
                        const std::string &dmuonc, const std::string &work, int rank, int world) {
  const std::string manifest = work + "/" + name + ".toml", plan = work + "/" + name + ".plan";
  int failed = 0;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(work);
      std::ofstream(manifest) << dmuon_torch::manifestToml(model, {name, ""});
      dmuon_torch::runDmuonc(dmuonc, {manifest, "--mesh", std::to_string(world), "-o", plan});
    } catch (const std::exception &e) {
      std::fprintf(stderr, "%s\n", e.what());
      failed = 1;
    }
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed)
    throw std::runtime_error("rank 0 could not compile the plan of " + name);
  return plan;
}

double meanOverRanks(double mine, int world) {
  double sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / world;
}

void expectThrow(const std::string &what, const std::string &needle,
                 const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      throw std::runtime_error(what + ": the message lacks '" + needle + "': " + e.what());
    std::printf("refused: %s: %s\n", what.c_str(), e.what());
    return;
  }
  throw std::runtime_error(what + ": nothing thrown");
}

// Each misuse of the bridge a C++ host can make, and the way on after it.
template <typename Model, typename Batch, typename Loss>
void checkMisuses(Model &model, dmuon_torch::ParamBridge &bridge, dmuon_torch::DmuonOptimizer &opt,
                  const Hooks &hooks, Batch batch, Loss lossOf, int rank, int world, bool say) {
  auto quiet = [&](const std::string &what, const std::string &needle,
                   const std::function<void()> &f) {
    if (say)
      expectThrow(what, needle, f);
    else
      try {
        f();
      } catch (const std::exception &) {
      }
  };
  bridge.beginStep();
  quiet("preForward of no module", "has no module 'nope'", [&] { bridge.preForward("nope"); });
  quiet("postForward without preForward", "without preForward",
        [&] { bridge.postForward("stem", torch::zeros({1})); });
  bridge.preForward(kRootGroup);
  quiet("a preForward without its postForward", "had no postForward", [&] { bridge.endBackward(); });
  opt.abandonStep();
  bridge.beginStep();
  lossOf(model, batch(kSteps, rank, world), hooks).backward();
  opt.step();
  if (say)
    std::printf("abandonStep: the next step ran\n");
}

template <typename Model, typename Batch, typename Loss>
Run runDmuon(const std::string &name, const std::string &dmuonc, const std::string &work,
             int rank, int world, Batch batch, Loss lossOf, std::set<std::string> &matrices,
             bool misuses) {
  torch::manual_seed(0);
  Model model;
  dmuon::Plan plan(compilePlan(model, name, dmuonc, work, rank, world));
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t options;
  dmuon_runtime_options_init(&options);
  options.backend = DMUON_BACKEND_MPI;
  options.communicator = &comm;
  options.lr = kLr;
  options.adamw_lr = kAdamwLr;
  dmuon::Runtime rt(plan, options);
  dmuon_torch::ParamBridge bridge(rt, plan, model);
  dmuon_torch::DmuonOptimizer opt(rt, plan, bridge, model);
  torch::optim::StepLR sched(opt, 1, 0.5);
  const Hooks hooks = [&](const std::string &path, std::function<torch::Tensor()> f) {
    bridge.preForward(path);
    return bridge.postForward(path, f());
  };
  for (int i = 0; i < plan.numParams(); ++i)
    if (plan.param(i).role == DMUON_ROLE_MUON)
      matrices.insert(plan.param(i).name);
  auto gathered = [&] {
    torch::manual_seed(0);
    Model replica; // frozen params: the same initial values as the model's
    bridge.gatherInto(replica);
    return values(replica);
  };
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    bridge.beginStep();
    opt.zero_grad();
    torch::Tensor loss = lossOf(model, batch(step, rank, world), hooks);
    loss.backward();
    opt.step();
    const double rate = rt.hyperParams().lr, want = kLr * stepLrScale(step);
    if (std::abs(rate - want) > 1e-6 * want || std::abs(opt.group("muon").lr - want) > 1e-6 * want)
      throw std::runtime_error(name + ": step " + std::to_string(step) + " ran at lr " +
                               std::to_string(rate) + ", StepLR set " + std::to_string(want));
    sched.step();
    run.losses.push_back(meanOverRanks(loss.item<double>(), world));
    if (step == 0)
      run.afterFirst = gathered();
  }
  run.final = gathered();
  for (const auto &np : model.named_parameters())
    if (!np.value().requires_grad() && !torch::equal(np.value(), run.final[np.key()]))
      throw std::runtime_error(name + ": frozen param '" + np.key() + "' moved");
  if (misuses) {
    checkMisuses(model, bridge, opt, hooks, batch, lossOf, rank, world, rank == 0);
    // The device layer: params not in the memory the runtime's backend keeps.
    torch::nn::Module elsewhere;
    elsewhere.register_parameter("w", torch::empty({4, 4}, torch::Device(torch::kMeta)));
    expectThrow("a param on the meta device with an MPI runtime",
                "is on meta but the runtime was made with the MPI backend",
                [&] { dmuon_torch::ParamBridge refused(rt, plan, elsewhere); });
  }
  return run;
}

double worstRelative(const std::map<std::string, torch::Tensor> &got,
                     const std::map<std::string, torch::Tensor> &want, std::string &where) {
  double worst = 0;
  for (const auto &[name, w] : want) {
    const double e = (got.at(name) - w).norm().item<double>() /
                     std::max(w.norm().item<double>(), 1e-30);
    if (e > worst) {
      worst = e;
      where = name;
    }
  }
  return worst;
}

template <typename Model, typename Batch, typename Loss>
bool check(const std::string &name, const std::string &dmuonc, const std::string &work, int rank,
           int world, Batch batch, Loss lossOf, bool misuses) {
  std::set<std::string> matrices;
  const Run got = runDmuon<Model>(name, dmuonc, work, rank, world, batch, lossOf, matrices,
                                  misuses);
  if (rank != 0)
    return true;
  const Run want = runReference<Model>(matrices, world, batch, lossOf);
  std::string where;
  const double paramErr = worstRelative(got.afterFirst, want.afterFirst, where);
  double lossErr = 0;
  for (int i = 0; i < kSteps; ++i)
    lossErr = std::max(lossErr, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
  std::printf("%s, %d ranks: %zu matrices; losses %.6f %.6f %.6f (reference %.6f %.6f %.6f); "
              "step-1 params %.2e (%s), losses %.1e\n",
              name.c_str(), world, matrices.size(), got.losses[0], got.losses[1], got.losses[2],
              want.losses[0], want.losses[1], want.losses[2], paramErr, where.c_str(), lossErr);
  return paramErr <= 1e-5 && lossErr <= 1e-4;
}

std::pair<torch::Tensor, torch::Tensor> images(int step, int rank, int world) {
  torch::manual_seed(100 + step);
  torch::Tensor x = torch::randn({kGlobalBatch, 3, 8, 8}), y = torch::randint(0, 10, {kGlobalBatch});
  const int local = kGlobalBatch / world;
  return {x.narrow(0, rank * local, local), y.narrow(0, rank * local, local)};
}

std::pair<torch::Tensor, torch::Tensor> tokens(int step, int rank, int world) {
  torch::manual_seed(200 + step);
  torch::Tensor w = torch::randint(0, 64, {kGlobalBatch, 9});
  const int local = kGlobalBatch / world;
  w = w.narrow(0, rank * local, local);
  return {w.narrow(1, 0, 8), w.narrow(1, 1, 8)};
}

int run(const std::string &dmuonc, const std::string &work, int rank, int world) {
  auto convLoss = [](ConvNet &m, const std::pair<torch::Tensor, torch::Tensor> &b,
                     const Hooks &h) { return torch::cross_entropy_loss(m.forward(b.first, h), b.second); };
  auto lmLoss = [](TiedLm &m, const std::pair<torch::Tensor, torch::Tensor> &b, const Hooks &h) {
    return torch::cross_entropy_loss(m.forward(b.first, h).reshape({-1, 64}),
                                     b.second.reshape({-1}));
  };
  bool ok = check<ConvNet>("convnet", dmuonc, work, rank, world, images, convLoss, true);
  ok = check<TiedLm>("tiedlm", dmuonc, work, rank, world, tokens, lmLoss, false) && ok;
  if (rank == 0)
    std::printf(ok ? "torch_host_check: OK\n" : "torch_host_check: beyond tolerance\n");
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 2;
  if (argc == 3) {
    try {
      torch::set_num_threads(1);
      code = run(argv[1], argv[2], rank, world);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "torch_host_check (rank %d): %s\n", rank, e.what());
      code = 1;
    }
  } else if (rank == 0) {
    std::fprintf(stderr, "usage: torch_host_check DMUONC WORK_DIR\n");
  }
  int worst = 0;
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
