// A libtorch host built against an installed dmuon::torch: a small residual
// MLP trained for a few steps with Muon (its block matrices) and AdamW (the
// rest) through the installed libdmuon, over MPI, with the plan compiled by
// the installed dmuonc from the model's own manifest. Exits 0 only when the
// loss over the global batch falls by half and the trained values gathered
// into a replica give the same loss on every rank.
//
// usage: mpirun -n R torch_consumer DMUONC WORK_DIR STEPS
#include <dmuon/torch/DmuonTorch.h>

#include <mpi.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace {

constexpr int64_t kIn = 8, kWidth = 32, kBlocks = 2, kBatch = 64;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : fc1(register_module(
            "fc1", torch::nn::Linear(torch::nn::LinearOptions(kWidth, 2 * kWidth).bias(false)))),
        fc2(register_module(
            "fc2", torch::nn::Linear(torch::nn::LinearOptions(2 * kWidth, kWidth).bias(false)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return x + fc2(torch::gelu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

// Param names are module paths in forward order (in, blocks.N.fc1/fc2,
// head): dmuonc's defaults put the matrices but the head on Muon, the head
// and the biases on AdamW, and make each blocks.N a hook group (and each
// root-level module one of its own).
struct MlpImpl : torch::nn::Module {
  MlpImpl() : in(register_module("in", torch::nn::Linear(kIn, kWidth))) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t b = 0; b < kBlocks; ++b)
      blocks->push_back(Block());
    head = register_module("head", torch::nn::Linear(kWidth, 1));
  }
  // Each module's forward between the bridge's hooks, for the module's path
  // (a path without a hook group is no call); `bridge` null: a plain
  // forward (the replica).
  torch::Tensor forward(torch::Tensor x, dmuon_torch::ParamBridge *bridge) {
    auto hooked = [&](const std::string &path, auto &&forwardOf) {
      if (bridge)
        bridge->preForward(path);
      torch::Tensor out = forwardOf(x);
      return bridge ? bridge->postForward(path, out) : out;
    };
    x = hooked("in", [&](const torch::Tensor &t) { return in(t); });
    for (size_t b = 0; b < blocks->size(); ++b)
      x = hooked("blocks." + std::to_string(b),
                 [&](const torch::Tensor &t) { return blocks->at<BlockImpl>(b).forward(t); });
    return hooked("head", [&](const torch::Tensor &t) { return head(t); });
  }
  torch::nn::Linear in{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(Mlp);

double meanOverRanks(double mine) {
  double sum = 0;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / world;
}

bool sameOnEveryRank(double v) {
  double lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// Rank 0 compiles the plan; every rank learns whether that worked.
std::string compilePlan(const Mlp &model, const std::string &dmuonc, const std::string &work,
                        int rank, int world) {
  const std::string manifest = work + "/mlp.toml", plan = work + "/mlp.plan";
  std::string error;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(work);
      std::ofstream(manifest) << dmuon_torch::manifestToml(*model, {"mlp", ""});
      dmuon_torch::runDmuonc(dmuonc, {manifest, "--mesh", std::to_string(world),
                                      "--small-param-threshold=0", "-o", plan});
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  int failed = error.empty() ? 0 : 1;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed)
    throw std::runtime_error(rank == 0 ? error : "rank 0 could not compile the plan");
  return plan;
}

int run(const std::string &dmuonc, const std::string &work, int steps, int rank, int world) {
  if (kBatch % world != 0)
    throw std::runtime_error("the batch of " + std::to_string(kBatch) + " does not split over " +
                             std::to_string(world) + " ranks");
  torch::manual_seed(0); // the same initial values and data on every rank
  Mlp model;
  const torch::Tensor x = torch::randn({kBatch, kIn});
  const torch::Tensor y = torch::sin(x.sum(1, true));
  const int64_t local = kBatch / world;
  const torch::Tensor myX = x.narrow(0, rank * local, local),
                      myY = y.narrow(0, rank * local, local);

  dmuon::Plan plan(compilePlan(model, dmuonc, work, rank, world));
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t options;
  dmuon_runtime_options_init(&options);
  options.backend = DMUON_BACKEND_MPI;
  options.communicator = &comm;
  options.lr = 0.02;
  options.adamw_lr = 0.01;
  dmuon::Runtime rt(plan, options);
  dmuon_torch::ParamBridge bridge(rt, plan, *model);

  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    bridge.beginStep();
    // The mean over this rank's rows; the runtime averages the gradients
    // over the ranks, so the step is the global batch's.
    torch::Tensor loss = torch::mse_loss(model->forward(myX, &bridge), myY);
    loss.backward();
    bridge.endBackward();
    rt.step();
    last = meanOverRanks(loss.item<double>());
    if (step == 0)
      first = last;
    if (rank == 0)
      std::printf("step %2d  loss %.6f\n", step, last);
  }

  Mlp replica;
  bridge.gatherInto(*replica); // collective
  double trained = 0;
  {
    torch::NoGradGuard noGrad;
    trained = torch::mse_loss(replica->forward(x, nullptr), y).item<double>();
  }
  if (!sameOnEveryRank(trained))
    throw std::runtime_error("the gathered replicas differ between ranks");
  if (rank == 0)
    std::printf("torch_consumer: %d ranks, %d params in %d hook groups; loss %.6f -> %.6f "
                "(replica after the last step: %.6f)\n",
                world, plan.numParams(), plan.numHookGroups(), first, last, trained);
  if (!(last < 0.5 * first) || !(trained < 0.5 * first))
    throw std::runtime_error("the loss did not fall by half: " + std::to_string(first) + " -> " +
                             std::to_string(last) + " (replica " + std::to_string(trained) + ")");
  if (rank == 0)
    std::printf("torch_consumer: OK, the loss fell\n");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 1;
  if (argc != 4) {
    if (rank == 0)
      std::fprintf(stderr, "usage: torch_consumer DMUONC WORK_DIR STEPS\n");
    code = 2;
  } else {
    try {
      torch::set_num_threads(1);
      code = run(argv[1], argv[2], std::stoi(argv[3]), rank, world);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "torch_consumer (rank %d): %s\n", rank, e.what());
      code = 1;
    }
  }
  // A failure on one rank must not leave the others waiting in a collective.
  if (code != 0)
    MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}
