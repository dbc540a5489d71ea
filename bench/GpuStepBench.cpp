// dmuon-gpu-step: the optimizer step of a plan (e.g. Llama-3.1-8B's layer
// set at --mesh 1) on one GPU through libdmuon's NCCL backend at world size
// 1, timed against the simulator's prediction for that GPU.
//
//   dmuon-gpu-step --plan P [--steps N] [--predicted-ms MS] [--band F]
//
// There is no model: every param is bound to the same pseudo-random values,
// each training step runs every hook group's hooks in the runtime's order
// (forward, then backward in reverse) and fills each gradient buffer with
// pseudo-random values between its group's pre_backward and post_backward
// (device-to-device copies from one random buffer: NS on zeros or constants
// would run the tensor cores at a lower power than real gradients), then
// step(). What is timed is step() through its completion on the device
// (rt.synchronize()): the simulator's optimizer_step_s (NS, the Muon and
// AdamW updates; no collective moves bytes at world size 1). One untimed
// step first (the workspaces, cuBLAS's heuristics), then --steps timed ones
// (default 3); the median is reported.
//
// With --predicted-ms, the last line is
//   target: optimizer step M ms, predicted P ms (ratio R, within 1/F..F): PASS|FAIL
// (F = --band, default 2): a check of the simulator's prediction, not a
// performance target. Exit status 0 when it ran, 1 on an error or when no
// GPU is visible, 2 on a bad command line.
#include "dmuon/dmuon.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void checkNccl(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

struct Options {
  std::string plan;
  int steps = 3;
  double predictedMs = 0; // 0: no target line
  double band = 2.0;
};

[[noreturn]] void usage(int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: dmuon-gpu-step --plan P [--steps N] [--predicted-ms MS] [--band F]\n");
  std::exit(status);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dmuon-gpu-step: %s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    auto number = [&]() {
      const char *v = next();
      char *end = nullptr;
      const double d = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(d > 0)) {
        std::fprintf(stderr, "dmuon-gpu-step: %s wants a positive number, not '%s'\n", a.c_str(),
                     v);
        usage(2);
      }
      return d;
    };
    if (a == "--plan")
      o.plan = next();
    else if (a == "--steps")
      o.steps = static_cast<int>(number());
    else if (a == "--predicted-ms")
      o.predictedMs = number();
    else if (a == "--band")
      o.band = number();
    else if (a == "--help" || a == "-h")
      usage(0);
    else {
      std::fprintf(stderr, "dmuon-gpu-step: unknown argument '%s'\n", a.c_str());
      usage(2);
    }
  }
  if (o.plan.empty()) {
    std::fprintf(stderr, "dmuon-gpu-step: --plan is required\n");
    usage(2);
  }
  if (o.steps < 1 || o.band < 1) {
    std::fprintf(stderr, "dmuon-gpu-step: --steps must be >= 1 and --band >= 1\n");
    usage(2);
  }
  return o;
}

// Uniform values in [-1, 1) * 1e-2 from a 64-bit LCG (gradient-like scale).
std::vector<float> randomValues(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float &f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>((static_cast<double>(x >> 40) / static_cast<double>(1ull << 23) - 1.0) *
                           1e-2);
  }
  return v;
}

// Fills `count` floats at `dst` from the random device buffer, in pieces.
void fillFrom(float *dst, int64_t count, const float *random, int64_t randomCount,
              cudaStream_t stream) {
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(count - done, randomCount);
    checkCuda(cudaMemcpyAsync(dst + done, random, static_cast<size_t>(n) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (gradient fill)");
    done += n;
  }
}

int run(const Options &opt) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "dmuon-gpu-step: no CUDA device visible\n");
    return 1;
  }
  checkCuda(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  checkCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  ncclUniqueId id;
  checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  checkNccl(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank");

  const dmuon::Plan plan(opt.plan);
  std::vector<dmuon_param_info_t> params;
  int64_t largest = 0, elements = 0;
  for (int i = 0; i < plan.numParams(); ++i) {
    params.push_back(plan.param(i));
    largest = std::max(largest, params.back().numel);
    elements += params.back().numel;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> stepMs;
  {
    dmuon_runtime_options_t o;
    dmuon_runtime_options_init(&o);
    o.backend = DMUON_BACKEND_NCCL;
    o.communicator = &comm;
    o.stream = stream;
    o.device = 0;
    dmuon::Runtime rt(plan, o);

    // One host buffer of the largest param's size, pseudo-random once (a
    // 16M-value pattern repeated), binds every param.
    const size_t pattern = std::min<size_t>(static_cast<size_t>(largest), size_t{1} << 24);
    std::vector<float> values = randomValues(pattern, 1);
    values.resize(static_cast<size_t>(largest));
    for (size_t k = pattern; k < values.size(); k += pattern)
      std::memcpy(values.data() + k, values.data(),
                  std::min(pattern, values.size() - k) * sizeof(float));
    for (int i = 0; i < static_cast<int>(params.size()); ++i)
      if (plan.paramRoute(i).route != DMUON_ROUTE_HOST)
        rt.bindParam(params[static_cast<size_t>(i)].name, values.data(),
                     params[static_cast<size_t>(i)].numel);
    values.clear();
    values.shrink_to_fit();

    // The gradients' random source on the device.
    const int64_t randomCount = int64_t{1} << 24;
    const std::vector<float> hostRandom = randomValues(static_cast<size_t>(randomCount), 2);
    float *random = nullptr;
    checkCuda(cudaMalloc(&random, static_cast<size_t>(randomCount) * sizeof(float)), "cudaMalloc");
    checkCuda(cudaMemcpy(random, hostRandom.data(), hostRandom.size() * sizeof(float),
                         cudaMemcpyHostToDevice),
              "cudaMemcpy (random)");
    const double setupS =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("dmuon-gpu-step: %s on %s: %d params (%.3g elements), %d hook groups; bound in "
                "%.1f s\n",
                opt.plan.c_str(), prop.name, plan.numParams(), static_cast<double>(elements),
                plan.numHookGroups(), setupS);
    std::fflush(stdout);

    const int groups = plan.numHookGroups();
    for (int step = 0; step <= opt.steps; ++step) {
      for (int g = 0; g < groups; ++g) {
        rt.preForward(g);
        rt.postForward(g);
      }
      for (int g = groups - 1; g >= 0; --g) {
        rt.preBackward(g);
        for (int i = 0; i < static_cast<int>(params.size()); ++i)
          if (params[static_cast<size_t>(i)].hook_group == g)
            fillFrom(rt.gradView(i), params[static_cast<size_t>(i)].numel, random, randomCount,
                     stream);
        rt.postBackward(g);
      }
      // Params outside the hooks (replicated): gradients valid at all times.
      for (int i = 0; i < static_cast<int>(params.size()); ++i) {
        const dmuon_param_info_t &p = params[static_cast<size_t>(i)];
        if (p.hook_group < 0 && plan.paramRoute(i).route == DMUON_ROUTE_REPLICATED)
          fillFrom(rt.gradView(i), p.numel, random, randomCount, stream);
      }
      rt.finishBackward();
      rt.synchronize();
      const auto s0 = std::chrono::steady_clock::now();
      rt.step();
      rt.synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
      std::printf("step %d: optimizer step %.3f ms%s\n", step, ms, step == 0 ? " (untimed)" : "");
      std::fflush(stdout);
      if (step > 0)
        stepMs.push_back(ms);
    }
    std::printf("ns_flops per step: %.4g\n", rt.nsFlops() / (opt.steps + 1));
    checkCuda(cudaFree(random), "cudaFree");
  }
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);

  std::sort(stepMs.begin(), stepMs.end());
  const double median = stepMs[stepMs.size() / 2];
  std::printf("optimizer step: median %.3f ms over %d steps\n", median, opt.steps);
  if (opt.predictedMs > 0) {
    const double ratio = median / opt.predictedMs;
    const bool ok = ratio >= 1.0 / opt.band && ratio <= opt.band;
    std::printf("target: optimizer step %.3f ms, predicted %.3f ms (ratio %.2f, within %.2g..%.2g): "
                "%s\n",
                median, opt.predictedMs, ratio, 1.0 / opt.band, opt.band, ok ? "PASS" : "FAIL");
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const Options opt = parse(argc, argv);
  try {
    return run(opt);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dmuon-gpu-step: error: %s\n", e.what());
    return 1;
  }
}
