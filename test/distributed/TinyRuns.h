// The runs mpi_test.cpp compares: one 10-step run of the tiny host through
// libdmuon on every rank (Distributed: set-up, the host route's params, the
// I1-I4 and counter checks per step) and the single-process reference on
// the full global batch. Included by mpi_test.cpp and pipeline_test.cpp (the
// reference, the options, the tolerances); its names live in the including
// file's anonymous namespace.
#ifndef DMUON_TEST_DISTRIBUTED_TINYRUNS_H
#define DMUON_TEST_DISTRIBUTED_TINYRUNS_H

#include "TinyModel.h"
#include "TinyRuntime.h"

#include "dmuon/dmuon.h"
#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"

#include "MpiCheck.h"
#include "ReferenceHyper.h"

#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kSteps = 10;
constexpr double kRelTol = 1e-4;

using mpicheck::fail;
using mpicheck::gFailures;
using mpicheck::gRank;
using mpicheck::gWorld;
using mpicheck::globalFailures;
using mpicheck::info;
using reference::adamwHyper;
using reference::kHyper;
using reference::muonHyper;

// ------------------------------------------------------------- set-up
struct Mesh {
  int replicas = 1; // R
  int shards = 1;   // G
  std::string text;
};

// inline: pipeline_test.cpp reads its mesh from the plan instead.
inline Mesh parseMesh(const std::string &s) {
  Mesh m;
  m.text = s;
  auto x = s.find('x');
  if (x == std::string::npos) {
    m.shards = std::stoi(s);
  } else {
    m.replicas = std::stoi(s.substr(0, x));
    m.shards = std::stoi(s.substr(x + 1));
  }
  return m;
}

constexpr uint64_t kSeed = 7;

dmuon_runtime_options_t makeOptions(MPI_Comm *comm, dmuon_mode_t mode, int replicateAsync) {
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = comm;
  o.mode = mode;
  o.replicate_async = replicateAsync;
  o.manage_adamw = 1;
  o.lr = kHyper.lr;
  o.momentum = kHyper.momentum;
  o.weight_decay = kHyper.weightDecay;
  o.nesterov = kHyper.nesterov;
  o.ns_steps = kHyper.nsSteps;
  o.adamw_lr = kHyper.adamwLr;
  o.adamw_beta1 = kHyper.beta1;
  o.adamw_beta2 = kHyper.beta2;
  o.adamw_eps = kHyper.eps;
  o.adamw_weight_decay = kHyper.adamwWeightDecay;
  return o;
}

using Params = std::map<std::string, std::vector<float>>;

// How far one param of a run is from the same param of another.
struct ParamDiff {
  double maxDiff = 0, maxAbs = 0; // max |got - want|, max |want|
  double rel = 0;                 // maxDiff / maxAbs
};

// Every param of `want` against `got`'s, handed to `each(name, diff)` when
// given; the worst relative difference and its param's name.
inline std::pair<double, std::string>
worstParamDiff(const Params &got, const Params &want,
               const std::function<void(const std::string &, const ParamDiff &)> &each = {}) {
  std::pair<double, std::string> worst{0.0, ""};
  for (const auto &[name, w] : want) {
    const std::vector<float> &g = got.at(name);
    ParamDiff d;
    for (size_t i = 0; i < w.size(); ++i) {
      d.maxDiff = std::max(d.maxDiff, std::fabs(static_cast<double>(g[i]) - w[i]));
      d.maxAbs = std::max(d.maxAbs, std::fabs(static_cast<double>(w[i])));
    }
    d.rel = d.maxDiff / std::max(d.maxAbs, 1e-30);
    if (d.rel > worst.first)
      worst = {d.rel, name};
    if (each)
      each(name, d);
  }
  return worst;
}

struct Trajectory {
  std::vector<float> losses; // global mean loss per step
  Params initial;            // gathered right after binding
  Params final;              // gathered after the last step
};

// ------------------------------------------------------------ reference
// Single-process Muon + AdamW on the full global batch.
Trajectory runReference(const dmuon::Plan &plan, const tiny::Config &cfg) {
  namespace k = dmuon::kernels;
  tiny::ParamStore store(cfg, kSeed);
  tiny::Data data(cfg, kSeed);
  tiny::Model model(cfg, cfg.globalBatch);
  std::vector<float> x(static_cast<size_t>(cfg.globalBatch * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(cfg.globalBatch * cfg.outDim));

  const k::MuonHyper mh = muonHyper();
  const k::AdamWHyper ah = adamwHyper();

  struct State {
    dmuon_param_info_t info;
    std::vector<float> m, v;
  };
  std::vector<State> states;
  for (int i = 0; i < plan.numParams(); ++i) {
    State s;
    s.info = plan.param(i);
    s.m.assign(static_cast<size_t>(s.info.numel), 0.0f);
    s.v.assign(static_cast<size_t>(s.info.numel), 0.0f);
    states.push_back(std::move(s));
  }

  Trajectory tr;
  for (const tiny::ParamSpec &s : store.specs())
    tr.initial[s.name] = store.values(s.name);
  k::NsWorkspace ws;
  for (int step = 0; step < kSteps; ++step) {
    data.batch(step, 0, cfg.globalBatch, x.data(), t.data());
    store.zeroGrads();
    tr.losses.push_back(model.forwardBackward(store, x.data(), t.data()));
    for (State &s : states) {
      std::vector<float> &p = store.values(s.info.name);
      const std::vector<float> &g = store.grads(s.info.name);
      if (s.info.role == DMUON_ROLE_MUON) {
        if (s.info.ndim != 2)
          throw std::runtime_error("reference: Muon param is not a matrix");
        k::muonStep(p.data(), s.m.data(), g.data(), 1, s.info.shape[0], s.info.shape[1], mh, ws);
      } else {
        k::adamwStep(p.data(), s.m.data(), s.v.data(), g.data(), s.info.numel, step + 1, ah);
      }
    }
  }
  for (const tiny::ParamSpec &s : store.specs())
    tr.final[s.name] = store.values(s.name);
  return tr;
}

// ---------------------------------------------------------- host route
// The params the plan leaves to the host: kept here as a DDP host keeps
// them, with fp32 values on every rank, the gradient averaged over all ranks
// by one all-reduce after backward, and AdamW with the run's settings.
class HostParams {
public:
  HostParams(const dmuon::Plan &plan, const tiny::Config &cfg) {
    for (const tiny::ParamSpec &spec : tiny::paramSpecs(cfg)) {
      const int i = plan.findParam(spec.name);
      if (plan.paramRoute(i).route != DMUON_ROUTE_HOST)
        continue;
      Held &h = held_[spec.name];
      h.values = tiny::initParam(cfg, spec, kSeed);
      h.grad.assign(h.values.size(), 0.0f);
      h.m.assign(h.values.size(), 0.0f);
      h.v.assign(h.values.size(), 0.0f);
    }
  }
  bool holds(const std::string &name) const { return held_.count(name) != 0; }
  const std::vector<float> &values(const std::string &name) const { return held_.at(name).values; }
  float *grad(const std::string &name) { return held_.at(name).grad.data(); }
  void zeroGrads() {
    for (auto &[name, h] : held_)
      std::fill(h.grad.begin(), h.grad.end(), 0.0f);
  }
  void step(int step) {
    const dmuon::kernels::AdamWHyper ah = adamwHyper();
    for (auto &[name, h] : held_) {
      MPI_Allreduce(MPI_IN_PLACE, h.grad.data(), static_cast<int>(h.grad.size()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
      for (float &g : h.grad)
        g /= static_cast<float>(gWorld);
      dmuon::kernels::adamwStep(h.values.data(), h.m.data(), h.v.data(), h.grad.data(),
                                static_cast<int64_t>(h.values.size()), step + 1, ah);
    }
  }

private:
  struct Held {
    std::vector<float> values, grad, m, v;
  };
  std::map<std::string, Held> held_;
};

// The runtime's views and hooks, except for the host's own params.
class HostRoutedAccess : public tiny::ParamAccess {
public:
  HostRoutedAccess(tiny::RuntimeAccess &runtime, HostParams &host)
      : runtime_(runtime), host_(host) {}
  const float *param(const std::string &name) override {
    return host_.holds(name) ? host_.values(name).data() : runtime_.param(name);
  }
  float *grad(const std::string &name) override {
    return host_.holds(name) ? host_.grad(name) : runtime_.grad(name);
  }
  void beforeLayerForward(int l) override { runtime_.beforeLayerForward(l); }
  void afterLayerForward(int l) override { runtime_.afterLayerForward(l); }
  void beforeLayerBackward(int l) override { runtime_.beforeLayerBackward(l); }
  void afterLayerBackward(int l) override { runtime_.afterLayerBackward(l); }

private:
  tiny::RuntimeAccess &runtime_;
  HostParams &host_;
};

// ---------------------------------------------------------- distributed
struct RunSpec {
  const char *label;
  dmuon_mode_t mode;
  int replicateAsync;
  bool checks; // I1-I4 and byte counts after every step (synchronizes every step)
};

const char *kKinds[] = {"broadcast", "reduce",  "replicate",
                                              "allreduce", "gather", "scatter",
                                              "allgather", "reduce_scatter"};
static_assert(sizeof kKinds / sizeof kKinds[0] == DMUON_COLLECTIVE_COUNT,
              "a name for every collective kind");

class Distributed {
public:
  Distributed(const dmuon::Plan &plan, const tiny::Config &cfg, const Mesh &mesh)
      : plan_(plan), cfg_(cfg), mesh_(mesh), binding_(plan, cfg) {
    myReplicate_ = gRank / mesh.shards;
    myShard_ = gRank % mesh.shards;
    for (int i = 0; i < plan.numParams(); ++i) {
      dmuon_param_info_t p = plan.param(i);
      if (p.role == DMUON_ROLE_MUON)
        muon_.push_back(p);
    }
  }

  // Plan-level ownership facts, independent of any runtime.
  void checkPlanOwners() {
    if (muon_.empty())
      fail("[%s] the plan has no Muon params", mesh_.text.c_str());
    std::vector<int> owned(static_cast<size_t>(gWorld), 0);
    for (const dmuon_param_info_t &p : muon_) {
      if (p.owner_shard < 0 || p.owner_shard >= mesh_.shards || p.owner_replicate < 0 ||
          p.owner_replicate >= mesh_.replicas)
        fail("[%s] %s: owner slot (%d,%d) outside the %dx%d mesh", mesh_.text.c_str(), p.name,
             p.owner_shard, p.owner_replicate, mesh_.replicas, mesh_.shards);
      else if (p.owner_rank != p.owner_replicate * mesh_.shards + p.owner_shard)
        fail("[%s] %s: owner_rank %d is not the rank of slot (%d,%d)", mesh_.text.c_str(), p.name,
             p.owner_rank, p.owner_shard, p.owner_replicate);
      else
        ++owned[static_cast<size_t>(p.owner_rank)];
      if (p.hook_group < 0)
        fail("[%s] %s: Muon param without a hook group", mesh_.text.c_str(), p.name);
    }
    int owners = 0;
    for (int n : owned)
      owners += n > 0;
    info("[%s] plan: %zu Muon params over %d owner ranks, %d hook groups", mesh_.text.c_str(),
         muon_.size(), owners, plan_.numHookGroups());
    if (gWorld > 1 && owners < 2)
      fail("[%s] only %d owner ranks; the test wants several", mesh_.text.c_str(), owners);
  }

  Trajectory run(const RunSpec &spec) {
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt = makeOptions(&comm, spec.mode, spec.replicateAsync);
    dmuon::Runtime rt(plan_, opt);
    tiny::bindInitialParams(rt, cfg_, kSeed);

    HostParams host(plan_, cfg_);

    Trajectory tr;
    tr.initial = gatherAll(rt, host);

    const int64_t local = cfg_.globalBatch / gWorld;
    tiny::Data data(cfg_, kSeed);
    tiny::Model model(cfg_, local);
    tiny::RuntimeAccess runtimeAccess(rt, binding_);
    HostRoutedAccess access(runtimeAccess, host);
    std::vector<float> x(static_cast<size_t>(local * cfg_.inDim));
    std::vector<float> t(static_cast<size_t>(local * cfg_.outDim));

    for (int step = 0; step < kSteps; ++step) {
      data.batch(step, gRank * local, local, x.data(), t.data());
      if (spec.checks)
        rt.resetCommCounters();
      host.zeroGrads();
      const float mine = model.forwardBackward(access, x.data(), t.data());
      if (spec.checks) {
        rt.finishBackward();
        checkI3(rt, spec, step);
      }
      rt.step();
      host.step(step);
      if (spec.checks) {
        rt.synchronize();
        checkCounters(rt, spec, step);
        checkI1I2I4(rt, spec, step);
      }
      double value = mine, sum = 0;
      MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      tr.losses.push_back(static_cast<float>(sum / gWorld));
    }
    rt.synchronize();
    // The plan prices a step in its own mode (the tiny plans: Z3, async
    // replicate) whose host synchronizes only when it must.
    if (!spec.checks && spec.mode == DMUON_MODE_Z3 && spec.replicateAsync)
      checkMemory(rt, spec);
    tr.final = gatherAll(rt, host);
    return tr;
  }

  // What the runtime allocated, by category, at its peak over the run,
  // equals the plan's per-rank memory figures.
  void checkMemory(dmuon::Runtime &rt, const RunSpec &spec) {
    const dmuon_memory_report_t got = rt.memory(), want = rt.plannedMemory();
    const struct {
      const char *name;
      uint64_t got, want;
    } categories[] = {{"masters", got.masters.peak, want.masters.peak},
                      {"momentum", got.momentum.peak, want.momentum.peak},
                      {"values", got.values.peak, want.values.peak},
                      {"adam moments", got.adam_moments.peak, want.adam_moments.peak},
                      {"grads", got.grads.peak, want.grads.peak},
                      {"buffers", got.buffers.peak, want.buffers.peak}};
    for (const auto &c : categories)
      if (c.got != c.want)
        fail("[%s %s] memory: %s peaked at %" PRIu64 " bytes, the plan says %" PRIu64,
             mesh_.text.c_str(), spec.label, c.name, c.got, c.want);
    if (gRank == 0)
      std::printf("[%s %s] rank 0 memory peaks equal the plan's: masters %" PRIu64
                  " momentum %" PRIu64 " values %" PRIu64 " adam %" PRIu64 " grads %" PRIu64
                  " buffers %" PRIu64 "\n",
                  mesh_.text.c_str(), spec.label, got.masters.peak, got.momentum.peak,
                  got.values.peak, got.adam_moments.peak, got.grads.peak, got.buffers.peak);
  }

private:
  Params gatherAll(dmuon::Runtime &rt, const HostParams &host) {
    Params out;
    for (const tiny::ParamSpec &s : binding_.specs()) {
      if (host.holds(s.name)) {
        out[s.name] = host.values(s.name);
        continue;
      }
      std::vector<float> v(static_cast<size_t>(s.numel));
      rt.gatherParam(s.name, v.data(), s.numel);
      out[s.name] = std::move(v);
    }
    return out;
  }

  bool isOwnerHere(const dmuon_param_info_t &p) const {
    return p.owner_shard == myShard_ && p.owner_replicate == myReplicate_;
  }

  void checkI3(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    for (const dmuon_param_info_t &p : muon_) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      if ((s.has_reduced_grad != 0) != owner)
        fail("[%s %s] step %d, after finish_backward: I3: %s has_reduced_grad=%d but this rank "
             "(shard %d, replicate %d) %s the global owner (slot (%d,%d))",
             mesh_.text.c_str(), spec.label, step, p.name, s.has_reduced_grad, myShard_,
             myReplicate_, owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
    }
  }

  void checkI1I2I4(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    std::vector<uint64_t> sums;
    for (const dmuon_param_info_t &p : muon_) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      const bool column = p.owner_shard == myShard_;
      if ((s.is_owner != 0) != owner)
        fail("[%s %s] step %d: I1: %s is_owner=%d, but this rank (shard %d, replicate %d) %s "
             "its owner slot (%d,%d)",
             mesh_.text.c_str(), spec.label, step, p.name, s.is_owner, myShard_, myReplicate_,
             owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
      if ((s.has_owned_data != 0) != column)
        fail("[%s %s] step %d: I2: %s has_owned_data=%d, but this rank's shard %d %s the "
             "owner's shard %d",
             mesh_.text.c_str(), spec.label, step, p.name, s.has_owned_data, myShard_,
             column ? "is" : "is not", p.owner_shard);
      if ((s.has_momentum != 0) != owner)
        fail("[%s %s] step %d: %s has_momentum=%d on a rank that %s the global owner",
             mesh_.text.c_str(), spec.label, step, p.name, s.has_momentum,
             owner ? "is" : "is not");
      if (column && s.owned_checksum == 0)
        fail("[%s %s] step %d: I4: %s owned_checksum is 0 on a rank holding owned data",
             mesh_.text.c_str(), spec.label, step, p.name);
      if (!column && s.owned_checksum != 0)
        fail("[%s %s] step %d: %s owned_checksum=0x%016" PRIx64 " on a rank without owned data",
             mesh_.text.c_str(), spec.label, step, p.name, s.owned_checksum);
      sums.push_back(s.owned_checksum);
    }
    // I4: equal checksums across the owner's shard column.
    const size_t n = sums.size();
    std::vector<uint64_t> all(n * static_cast<size_t>(gWorld));
    MPI_Allgather(sums.data(), static_cast<int>(n), MPI_UINT64_T, all.data(), static_cast<int>(n),
                  MPI_UINT64_T, MPI_COMM_WORLD);
    if (gRank != 0)
      return; // one rank reports column disagreements
    for (size_t i = 0; i < n; ++i) {
      const dmuon_param_info_t &p = muon_[i];
      const uint64_t ref = all[static_cast<size_t>(p.owner_rank) * n + i];
      for (int r = 0; r < mesh_.replicas; ++r) {
        const int peer = r * mesh_.shards + p.owner_shard;
        const uint64_t got = all[static_cast<size_t>(peer) * n + i];
        if (got != ref)
          fail("[%s %s] step %d: I4: %s checksum 0x%016" PRIx64 " on rank %d differs from the "
               "owner rank %d's 0x%016" PRIx64,
               mesh_.text.c_str(), spec.label, step, p.name, got, peer, p.owner_rank, ref);
      }
    }
  }

  // This rank's bytes per step, worked out here from the param table and the
  // accounting rule of docs/plan-format.md, independently of the plan's stats
  // and the runtime: per Muon param p owned by slot (so, ro), with payload
  // P = numel * 4 rounded up to the 256-byte alignment of segments:
  //   broadcast (per pass: forward, and backward again under Z3) within my
  //     replicate row, root (so, my row): root sends (G-1)P, others receive P;
  //   reduce phase 1 within my row to (so, my row): root receives (G-1)P,
  //     others send P; phase 2 within column so to (so, ro): root receives
  //     (R-1)P, the column's other ranks send P;
  //   replicate within column so from (so, ro): sends (R-1)P, receives P;
  //   all-reduce of every replicated gradient: sends and receives its
  //     payload;
  //   per sharded param with shard S = shard_elements * 4 bytes: all-gather
  //     (per pass) and reduce-scatter within my row, each sending and
  //     receiving (G-1)S; all-reduce of the shard down my column: S.
  // Owner-routed AdamW params move like Muon params.
  dmuon_comm_counters_t predict(dmuon_mode_t mode) const {
    dmuon_comm_counters_t c{};
    const uint64_t G = static_cast<uint64_t>(mesh_.shards);
    const uint64_t R = static_cast<uint64_t>(mesh_.replicas);
    const uint64_t passes = mode == DMUON_MODE_Z2 ? 1 : 2;
    for (int i = 0; i < plan_.numParams(); ++i) {
      dmuon_param_info_t p = plan_.param(i);
      const dmuon_param_route_t route = plan_.paramRoute(i);
      const uint64_t bytes = static_cast<uint64_t>(p.numel) * sizeof(float);
      if (route.route == DMUON_ROUTE_REPLICATED) {
        if (gWorld > 1) {
          c.kinds[DMUON_COLLECTIVE_ALLREDUCE].sent += bytes;
          c.kinds[DMUON_COLLECTIVE_ALLREDUCE].received += bytes;
        }
        continue;
      }
      if (route.route == DMUON_ROUTE_SHARDED) {
        const uint64_t S = static_cast<uint64_t>(route.shard_elements) * sizeof(float);
        c.kinds[DMUON_COLLECTIVE_ALLGATHER].sent += passes * (G - 1) * S;
        c.kinds[DMUON_COLLECTIVE_ALLGATHER].received += passes * (G - 1) * S;
        c.kinds[DMUON_COLLECTIVE_REDUCE_SCATTER].sent += (G - 1) * S;
        c.kinds[DMUON_COLLECTIVE_REDUCE_SCATTER].received += (G - 1) * S;
        if (R > 1) {
          c.kinds[DMUON_COLLECTIVE_ALLREDUCE].sent += S;
          c.kinds[DMUON_COLLECTIVE_ALLREDUCE].received += S;
        }
        continue;
      }
      if (route.route != DMUON_ROUTE_OWNER)
        continue;
      // Each param of a segment starts at a 256-byte boundary (the default
      // alignment): a small AdamW param carries its padding.
      const uint64_t P = (bytes + 255) / 256 * 256;
      const bool column = p.owner_shard == myShard_;
      const bool owner = column && p.owner_replicate == myReplicate_;
      if (column) {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].sent += passes * (G - 1) * P;
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (G - 1) * P;
      } else {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].received += passes * P;
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += P;
      }
      // The replicate broadcast carries the fp32 masters, unpadded.
      if (owner) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (R - 1) * P;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].sent += (R - 1) * bytes;
      } else if (column) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += P;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].received += bytes;
      }
    }
    return c;
  }

  void checkCounters(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    dmuon_comm_counters_t got = rt.commCounters();
    dmuon_comm_counters_t want = rt.plannedCounters();
    const dmuon_comm_counters_t mine = predict(spec.mode);
    uint64_t total = 0;
    for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
      total += want.kinds[k].sent + want.kinds[k].received;
      if (step == 0 && (want.kinds[k].sent != mine.kinds[k].sent || want.kinds[k].received != mine.kinds[k].received))
        fail("[%s %s] %s: dmuon_runtime_planned_counters says sent %" PRIu64 " / received %" PRIu64
             ", the param table and the accounting rule give %" PRIu64 " / %" PRIu64,
             mesh_.text.c_str(), spec.label, kKinds[k], want.kinds[k].sent, want.kinds[k].received,
             mine.kinds[k].sent, mine.kinds[k].received);
    }
    if (step == 0 && gWorld > 1 && total == 0)
      fail("[%s %s] the plan predicts no communication at all on %d ranks", mesh_.text.c_str(),
           spec.label, gWorld);
    if (step == 0 && gRank == 0) {
      std::printf("[%s %s] rank 0 bytes per step (sent/received):", mesh_.text.c_str(),
                  spec.label);
      for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
        std::printf(" %s %" PRIu64 "/%" PRIu64, kKinds[k], got.kinds[k].sent, got.kinds[k].received);
      std::printf("\n");
    }
    for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
      if (got.kinds[k].sent != want.kinds[k].sent)
        fail("[%s %s] step %d: %s bytes sent %" PRIu64 ", the plan predicts %" PRIu64,
             mesh_.text.c_str(), spec.label, step, kKinds[k], got.kinds[k].sent, want.kinds[k].sent);
      if (got.kinds[k].received != want.kinds[k].received)
        fail("[%s %s] step %d: %s bytes received %" PRIu64 ", the plan predicts %" PRIu64,
             mesh_.text.c_str(), spec.label, step, kKinds[k], got.kinds[k].received,
             want.kinds[k].received);
    }
  }

  const dmuon::Plan &plan_;
  tiny::Config cfg_;
  Mesh mesh_;
  tiny::PlanBinding binding_;
  std::vector<dmuon_param_info_t> muon_;
  int myShard_ = 0, myReplicate_ = 0;
};

} // namespace

#endif
