// dmuon-trainer-cuda: dmuon-trainer on CUDA GPUs. The same tiny residual MLP
// (same params, initial values and data; forward/backward with cuBLAS in
// CudaModel.cu) trained with libdmuon's NCCL backend, with the same command
// line, loss lines and end-of-run table as the CPU trainer, plus --device and
// --check-against-cpu.
//
//   build/bin/dmuon-trainer-cuda --plan build/hosts/tiny/tiny-1.plan --steps 20
//   mpirun -n 4 build/bin/dmuon-trainer-cuda --plan build/hosts/tiny/tiny-4.plan
//
// Started by an MPI launcher it runs on MPI_COMM_WORLD, and otherwise as one
// process without MPI (TrainerWorld.h). MPI only bootstraps NCCL (rank 0's
// ncclGetUniqueId, broadcast, ncclCommInitRank over the world's ranks) and
// reduces the printed loss; every collective of the optimizer runs on NCCL.
// Each rank uses CUDA device
// (local rank % visible devices) unless --device says otherwise, one compute
// stream that is also the runtime's compute stream, and reads params from and
// accumulates gradients into the runtime's device views (tiny::RuntimeAccess,
// whose hooks run around each layer).
#include "CudaModel.h"
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "TrainerCommon.h"

#include "dmuon/dmuon.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const tiny::TrainerInfo kInfo = {
    "dmuon-trainer-cuda",
    "Trains a tiny residual MLP on CUDA GPUs (cuBLAS) with libdmuon's NCCL backend.",
    /*cuda=*/true};

// --check-against-cpu tolerances (relative): the loss, and each gradient's
// Frobenius-norm error. Both models compute in fp32; only the GEMMs' and the
// reductions' summation orders differ.
constexpr double kLossTolerance = 1e-4;
constexpr double kGradTolerance = 1e-3;

// Exit status when no CUDA device is visible (ctest's SKIP_RETURN_CODE).
constexpr int kSkipped = 77;

void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

void checkNccl(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(r));
}

// Owners of the stream, the NCCL communicator and device buffers; destroyed
// after the runtime that uses them (declaration order in run()).
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { checkCuda(cudaStreamCreate(&s), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
};

struct NcclComm {
  ncclComm_t c = nullptr;
  explicit NcclComm(tiny::World &world) {
    ncclUniqueId id;
    if (world.rank() == 0)
      checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    world.broadcast(&id, static_cast<int>(sizeof id), 0);
    checkNccl(ncclCommInitRank(&c, world.size(), id, world.rank()), "ncclCommInitRank");
  }
  ~NcclComm() { ncclCommDestroy(c); }
  NcclComm(const NcclComm &) = delete;
  NcclComm &operator=(const NcclComm &) = delete;
};

struct DeviceFloats {
  float *p = nullptr;
  explicit DeviceFloats(size_t n) { checkCuda(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc"); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats &) = delete;
  DeviceFloats &operator=(const DeviceFloats &) = delete;
};

// RuntimeAccess that also copies every gradient to the host at the last
// moment it is valid: a layer's before its post_backward (which reduces it
// away), the rest (adamw, always valid) when copyRemaining() is called.
class RecordingAccess : public tiny::RuntimeAccess {
public:
  RecordingAccess(dmuon::Runtime &rt, const tiny::PlanBinding &binding, cudaStream_t stream)
      : tiny::RuntimeAccess(rt, binding), binding_(binding), stream_(stream) {}
  void afterLayerBackward(int l) override {
    for (const tiny::ParamSpec &s : binding_.specs())
      if (s.layer == l)
        copy(s);
    tiny::RuntimeAccess::afterLayerBackward(l);
  }
  void copyRemaining() {
    for (const tiny::ParamSpec &s : binding_.specs())
      if (!grads.count(s.name))
        copy(s);
  }
  std::map<std::string, std::vector<float>> grads;

private:
  void copy(const tiny::ParamSpec &s) {
    std::vector<float> &g = grads[s.name];
    g.resize(static_cast<size_t>(s.numel));
    checkCuda(cudaMemcpyAsync(g.data(), grad(s.name), g.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (gradient)");
    checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  const tiny::PlanBinding &binding_;
  cudaStream_t stream_;
};

// Step 0 of the CPU model on this rank's batch from the same initial params:
// compares the loss and every gradient with the GPU's, prints (rank 0) the
// worst figures over all ranks, and returns whether every rank agreed.
bool checkAgainstCpu(const tiny::TrainerFlags &flags, const tiny::Config &cfg, int64_t local,
                     const std::vector<float> &x, const std::vector<float> &t, float gpuLoss,
                     const RecordingAccess &gpu, tiny::World &world) {
  tiny::ParamStore store(cfg, flags.seed);
  tiny::Model cpu(cfg, local);
  const float cpuLoss = cpu.forwardBackward(store, x.data(), t.data());
  double lossErr = std::fabs(static_cast<double>(gpuLoss) - cpuLoss) /
                   std::max(std::fabs(static_cast<double>(cpuLoss)), 1e-30);
  double gradErr = 0;
  std::string worst = "-";
  for (const tiny::ParamSpec &s : store.specs()) {
    const std::vector<float> &want = store.grads(s.name);
    const std::vector<float> &got = gpu.grads.at(s.name);
    double diff = 0, norm = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      const double d = static_cast<double>(got[k]) - want[k];
      diff += d * d;
      norm += static_cast<double>(want[k]) * want[k];
    }
    const double err = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (!(err <= gradErr)) { // NaN counts as the worst
      gradErr = std::isnan(err) ? INFINITY : err;
      worst = s.name;
    }
  }
  if (std::isnan(lossErr))
    lossErr = INFINITY;
  double all[2] = {lossErr, gradErr};
  world.max(all, 2);
  const bool ok = all[0] <= kLossTolerance && all[1] <= kGradTolerance;
  if (world.rank() == 0) {
    std::printf("check-against-cpu: step 0, rank 0: loss gpu %.6f cpu %.6f; worst over ranks: "
                "loss rel diff %.2e (tolerance %.0e), gradient rel error %.2e (tolerance "
                "%.0e; rank 0's worst: %s): %s\n",
                gpuLoss, cpuLoss, all[0], kLossTolerance, all[1], kGradTolerance, worst.c_str(),
                ok ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  return ok;
}

int run(const tiny::TrainerFlags &flags, tiny::World &world) {
  const int rank = world.rank();
  // Without a GPU on some rank every rank says so and exits kSkipped (ctest
  // reports the run as skipped, as CI has no GPU), rather than failing.
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess)
    devices = 0;
  if (world.min(devices) == 0) {
    if (devices == 0)
      std::fprintf(stderr,
                   "%s: rank %d: skipped: no CUDA device visible (cudaGetDeviceCount: %s)\n",
                   kInfo.program, rank, e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return kSkipped;
  }
  const int device = flags.device >= 0 ? flags.device : world.localRank() % devices;
  if (device >= devices)
    throw std::runtime_error("--device " + std::to_string(device) + ", but only " +
                             std::to_string(devices) + " CUDA devices are visible");
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop;
  checkCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

  dmuon::Plan plan(flags.plan);
  tiny::Config cfg;
  tiny::PlanBinding binding(plan, cfg);
  const int64_t local = tiny::localBatch(cfg, world.size());

  Stream stream;
  NcclComm comm(world);
  DeviceFloats xDev(static_cast<size_t>(local * cfg.inDim));
  DeviceFloats tDev(static_cast<size_t>(local * cfg.outDim));
  tiny::CudaModel model(cfg, local, stream.s);

  dmuon_runtime_options_t opt = tiny::runtimeOptions(flags);
  opt.backend = DMUON_BACKEND_NCCL;
  opt.communicator = &comm.c;
  opt.stream = stream.s;
  opt.device = device;
  dmuon::Runtime rt(plan, opt);
  tiny::bindInitialParams(rt, cfg, flags.seed);

  tiny::printRunHeader(kInfo, flags, plan, cfg, world, local,
                       ", GPU " + std::to_string(device) + " of rank 0 (" + prop.name + ")");

  tiny::Data data(cfg, flags.seed);
  tiny::RuntimeAccess access(rt, binding);
  std::vector<float> x(static_cast<size_t>(local * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(local * cfg.outDim));

  const dmuon_hyper_params_t base = rt.hyperParams();
  bool checked = true;
  double first = 0, last = 0;
  for (int step = 0; step < flags.steps; ++step) {
    data.batch(step, rank * local, local, x.data(), t.data());
    checkCuda(cudaMemcpyAsync(xDev.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice,
                              stream.s),
              "cudaMemcpyAsync (x)");
    checkCuda(cudaMemcpyAsync(tDev.p, t.data(), t.size() * sizeof(float), cudaMemcpyHostToDevice,
                              stream.s),
              "cudaMemcpyAsync (t)");
    if (step == 0 && flags.checkAgainstCpu) {
      RecordingAccess recording(rt, binding, stream.s);
      float mine = model.forwardBackward(recording, xDev.p, tDev.p);
      recording.copyRemaining(); // adamw gradients stay local until step()
      checked = checkAgainstCpu(flags, cfg, local, x, t, mine, recording, world);
      first = last = tiny::stepAndReport(rt, flags, base, step, mine, world);
      continue;
    }
    float mine = model.forwardBackward(access, xDev.p, tDev.p);
    const double loss = tiny::stepAndReport(rt, flags, base, step, mine, world);
    if (step == 0)
      first = loss;
    last = loss;
  }
  rt.synchronize();
  int rc = tiny::finishRun(kInfo, flags, rt, world, first, last);
  if (!checked) {
    if (rank == 0)
      std::fprintf(stderr,
                   "%s: error: --check-against-cpu: the GPU model disagrees with the CPU "
                   "model\n",
                   kInfo.program);
    rc = 1;
  }
  return rc;
}

} // namespace

int main(int argc, char **argv) { return tiny::trainerMain(argc, argv, kInfo, run); }
