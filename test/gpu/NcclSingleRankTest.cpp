// A single-rank NCCL runtime (world size 1) through full training steps of
// the example model, against the same steps on the CPU kernels, with the
// invariants I1, I2 and I4 and the plan's byte counts checked after every
// step. One process, no MPI: the communicator comes from a local
// ncclGetUniqueId. Needs a GPU; skips itself without one. Run by
// scripts/gpu-check and the GPU bundle (scripts/gpu-bundle), which points
// DMUON_TINY_PLAN_DIR at its own plans.
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"
#include "plan/Fingerprint.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kSeed = 7;
constexpr int kSteps = 3;

// Serves the model host copies of the runtime's device views and uploads the
// gradients the model writes before each post_backward.
class DeviceStagingAccess : public tiny::RuntimeAccess {
public:
  DeviceStagingAccess(dmuon::Runtime &rt, const tiny::PlanBinding &binding)
      : tiny::RuntimeAccess(rt, binding), rt_(rt), binding_(binding) {
    for (const tiny::ParamSpec &s : binding.specs()) {
      host_[s.name].resize(s.numel);
      grads_[s.name].assign(s.numel, 0.0f);
    }
  }
  const float *param(const std::string &name) override {
    std::vector<float> &h = host_.at(name);
    expectOk(cudaMemcpy(h.data(), tiny::RuntimeAccess::param(name), h.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
    return h.data();
  }
  float *grad(const std::string &name) override { return grads_.at(name).data(); }
  void afterLayerBackward(int l) override {
    for (const tiny::ParamSpec &s : binding_.specs())
      if (s.layer == l)
        upload(s.name);
    tiny::RuntimeAccess::afterLayerBackward(l);
  }
  // The embed/head gradients (adamw) are uploaded before the step.
  void uploadRemaining() {
    for (const tiny::ParamSpec &s : binding_.specs())
      if (s.layer < 0)
        upload(s.name);
  }

private:
  void upload(const std::string &name) {
    std::vector<float> &g = grads_.at(name);
    expectOk(cudaMemcpy(rt_.gradView(binding_.paramIndex(name)), g.data(), g.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
    std::fill(g.begin(), g.end(), 0.0f);
  }
  static void expectOk(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

  dmuon::Runtime &rt_;
  const tiny::PlanBinding &binding_;
  std::map<std::string, std::vector<float>> host_, grads_;
};

// The tiny plans: DMUON_TINY_PLAN_DIR in the environment (a bundle's own),
// else the build's.
std::string planDir() {
  const char *dir = std::getenv("DMUON_TINY_PLAN_DIR");
  return dir && *dir ? dir : DMUON_TINY_PLAN_DIR;
}

// After a synchronized step at world size 1, the one rank is every Muon
// matrix's owner (I1), holds its master (I2) and momentum, and the master's
// checksum is that of the values it serves (I4: one rank, so no column to
// agree with); every collective moved the bytes the plan says.
void expectInvariants(dmuon::Runtime &rt, const dmuon::Plan &plan,
                      const std::vector<tiny::ParamSpec> &specs, int step) {
  for (const tiny::ParamSpec &s : specs) {
    if (plan.param(plan.findParam(s.name)).role != DMUON_ROLE_MUON)
      continue;
    const dmuon_param_state_t st = rt.paramState(s.name);
    EXPECT_EQ(st.is_owner, 1) << "I1: " << s.name << ", step " << step;
    EXPECT_EQ(st.has_owned_data, 1) << "I2: " << s.name << ", step " << step;
    EXPECT_EQ(st.has_momentum, 1) << s.name << ", step " << step;
    std::vector<float> values(static_cast<size_t>(s.numel));
    rt.gatherParam(s.name, values.data(), s.numel);
    const uint64_t sum = dmuon::planfile::fnv1a64(reinterpret_cast<const uint8_t *>(values.data()),
                                                  values.size() * sizeof(float));
    EXPECT_EQ(st.owned_checksum, sum) << "I4: " << s.name << ", step " << step;
  }
  const dmuon_comm_counters_t got = rt.commCounters(), want = rt.plannedCounters();
  for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
    EXPECT_EQ(got.kinds[k].sent, want.kinds[k].sent) << "collective " << k << ", step " << step;
    EXPECT_EQ(got.kinds[k].received, want.kinds[k].received)
        << "collective " << k << ", step " << step;
  }
}

int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

} // namespace

TEST(NcclRuntime, SingleRankStepsMatchTheCpuKernels) {
  if (deviceCount() == 0)
    GTEST_SKIP() << "no CUDA device visible";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);

  tiny::Config cfg;
  dmuon::Plan plan(planDir() + "/tiny-1.plan");
  tiny::PlanBinding binding(plan, cfg);
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_NCCL;
  o.communicator = &comm;
  o.stream = stream;
  o.device = 0;
  {
    dmuon::Runtime rt(plan, o);
    tiny::bindInitialParams(rt, cfg, kSeed);
    DeviceStagingAccess access(rt, binding);

    // The same steps on the CPU: same data, the CPU kernels, the plan's defaults.
    tiny::ParamStore ref(cfg, kSeed);
    std::map<std::string, std::vector<float>> mom, adamM, adamV;
    for (const tiny::ParamSpec &s : ref.specs()) {
      mom[s.name].assign(s.numel, 0.0f);
      adamM[s.name].assign(s.numel, 0.0f);
      adamV[s.name].assign(s.numel, 0.0f);
    }
    dmuon::kernels::NsWorkspace ws;
    dmuon::kernels::AdamWHyper adamw;
    adamw.lr = 0.01f; // the plan is compiled with --adamw-lr=0.01

    tiny::Data data(cfg, kSeed);
    tiny::Model model(cfg, cfg.globalBatch), refModel(cfg, cfg.globalBatch);
    std::vector<float> x(cfg.globalBatch * cfg.inDim), t(cfg.globalBatch * cfg.outDim);
    for (int step = 0; step < kSteps; ++step) {
      data.batch(step, 0, cfg.globalBatch, x.data(), t.data());
      rt.resetCommCounters(); // this step's bytes against the plan's per-step figures
      float loss = model.forwardBackward(access, x.data(), t.data());
      access.uploadRemaining();
      rt.step();
      rt.synchronize();
      expectInvariants(rt, plan, binding.specs(), step);
      ref.zeroGrads();
      float refLoss = refModel.forwardBackward(ref, x.data(), t.data());
      EXPECT_NEAR(loss, refLoss, 2e-3 * std::fabs(refLoss) + 1e-5) << "step " << step;
      for (const tiny::ParamSpec &s : ref.specs()) {
        int index = plan.findParam(s.name);
        if (plan.param(index).role == DMUON_ROLE_MUON)
          dmuon::kernels::muonStep(ref.values(s.name).data(), mom[s.name].data(),
                                   ref.grads(s.name).data(), 1, s.shape[0], s.shape[1],
                                   dmuon::kernels::MuonHyper{}, ws);
        else
          dmuon::kernels::adamwStep(ref.values(s.name).data(), adamM[s.name].data(),
                                    adamV[s.name].data(), ref.grads(s.name).data(), s.numel,
                                    step + 1, adamw);
      }
    }
    rt.synchronize();
    for (const tiny::ParamSpec &s : ref.specs()) {
      std::vector<float> got(s.numel);
      rt.gatherParam(s.name, got.data(), s.numel);
      const std::vector<float> &want = ref.values(s.name);
      double maxDiff = 0, maxAbs = 0;
      for (int64_t k = 0; k < s.numel; ++k) {
        maxDiff = std::max(maxDiff, std::fabs(double(got[k]) - want[k]));
        maxAbs = std::max(maxAbs, std::fabs(double(want[k])));
      }
      // NS runs in bf16 on the GPU: the update (lr 0.02) differs by ~1%.
      EXPECT_LE(maxDiff, 2e-3 * std::max(1.0, maxAbs)) << s.name;
    }
    EXPECT_GT(rt.nsFlops(), 0.0);
  }
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
}
