// The distributed run mp_test.cpp compares with MpModel.h's reference: the
// model-parallel model through libdmuon on every rank (Distributed: set-up,
// local slices, the checks per step). Included by mp_test.cpp only; its
// names live in that file's anonymous namespace.
#ifndef DMUON_TEST_DISTRIBUTED_MPRUNS_H
#define DMUON_TEST_DISTRIBUTED_MPRUNS_H

#include "dmuon/dmuon.h"
#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"

#include "MpHost.h"
#include "MpiCheck.h"

#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
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
using namespace mpmodel;

// ------------------------------------------------------------ distributed
struct RunSpec {
  const char *label;
  dmuon_mode_t mode;
  int replicateAsync;
  bool checks; // I1-I4 and byte counts after every step (synchronizes every step)
};

const char *kKinds[] = {"broadcast", "reduce", "replicate",
                                              "allreduce", "gather", "scatter",
                                              "allgather", "reduce_scatter"};
static_assert(sizeof kKinds / sizeof kKinds[0] == DMUON_COLLECTIVE_COUNT,
              "a name for every collective kind");

class Distributed {
public:
  Distributed(const dmuon::Plan &plan, const Config &cfg, const std::vector<Spec> &specs,
              const Topology &topo, bool differentData)
      : plan_(plan), specs_(specs), topo_(topo), host_(plan, cfg, specs, topo, differentData) {}

  // Plan-level facts: the plan's params are the model's, every Muon param is
  // f32 with an owner slot inside the mesh, owner_rank the slot's rank at
  // model-parallel coordinate 0 (or, for a param its owner spans a data-
  // carrying dim for, the coordinate it names), and several owners own
  // something.
  void checkPlan() {
    if (plan_.numParams() != static_cast<int>(specs_.size()))
      fail("[%s] the plan has %d params, the model %zu", topo_.text.c_str(), plan_.numParams(),
           specs_.size());
    for (const Spec &s : specs_) {
      const dmuon_param_info_t &p = host_.info(s.name);
      bool same = p.ndim == static_cast<int>(s.shape.size());
      for (int d = 0; same && d < p.ndim; ++d)
        same = p.shape[d] == s.shape[static_cast<size_t>(d)];
      if (!same)
        fail("[%s] %s: the plan's (global) shape differs from the model's", topo_.text.c_str(),
             s.name.c_str());
      if (p.dtype != DMUON_DTYPE_F32)
        fail("[%s] %s: dtype %d, the test binds f32 views", topo_.text.c_str(), s.name.c_str(),
             static_cast<int>(p.dtype));
      const bool wantMuon = s.name.find(".up.") != std::string::npos ||
                            s.name.find(".down.") != std::string::npos ||
                            s.name.find("experts") != std::string::npos ||
                            // vocab's sharded head; ep-strided's is AdamW
                            (s.name == "head.weight" && s.shardDim >= 0 && s.splitFactor == 1);
      if ((p.role == DMUON_ROLE_MUON) != wantMuon)
        fail("[%s] %s: role %s, expected %s", topo_.text.c_str(), s.name.c_str(),
             p.role == DMUON_ROLE_MUON ? "muon" : "adamw", wantMuon ? "muon" : "adamw");
    }
    std::vector<int> slots(static_cast<size_t>(topo_.G * topo_.R * topo_.mpSize), 0);
    for (const dmuon_param_info_t &p : host_.muon()) {
      if (p.owner_shard < 0 || p.owner_shard >= topo_.G || p.owner_replicate < 0 ||
          p.owner_replicate >= topo_.R) {
        fail("[%s] %s: owner slot (%d,%d) outside the mesh", topo_.text.c_str(), p.name,
             p.owner_shard, p.owner_replicate);
        continue;
      }
      if (p.owner_rank < 0 || p.owner_rank >= gWorld) {
        fail("[%s] %s: owner_rank %d outside the world", topo_.text.c_str(), p.name,
             p.owner_rank);
        continue;
      }
      const int m = ownerMp(p);
      if (p.owner_rank != topo_.rankAt(p.owner_shard, p.owner_replicate, m))
        fail("[%s] %s: owner_rank %d is not the rank %d of slot (%d,%d) at %s=%d",
             topo_.text.c_str(), p.name, p.owner_rank,
             topo_.rankAt(p.owner_shard, p.owner_replicate, m), p.owner_shard,
             p.owner_replicate, topo_.mpName.c_str(), m);
      ++slots[static_cast<size_t>((p.owner_replicate * topo_.G + p.owner_shard) * topo_.mpSize +
                                  m)];
      if (p.hook_group < 0)
        fail("[%s] %s: Muon param without a hook group", topo_.text.c_str(), p.name);
    }
    int used = 0;
    for (int n : slots)
      used += n > 0;
    info("[%s] plan: %zu Muon params over %d of %d owners (owner slot x %s coordinate), %d "
         "hook groups",
         topo_.text.c_str(), host_.muon().size(), used, topo_.G * topo_.R * topo_.mpSize,
         topo_.mpName.c_str(), plan_.numHookGroups());
    if (topo_.G * topo_.R > 1 && used < 2)
      fail("[%s] only %d owner slots used; the test wants several", topo_.text.c_str(), used);
  }

  // A model-parallel param takes and gives its local shard: the global
  // numel is refused (with a status and a message, on every rank alike).
  void checkLocalSizes() {
    const int before = gFailures;
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt;
    dmuon_runtime_options_init(&opt);
    opt.backend = DMUON_BACKEND_MPI;
    opt.communicator = &comm;
    dmuon::Runtime rt(plan_, opt);
    int sharded = 0;
    for (const Spec &s : specs_) {
      if (s.shardDim < 0 || topo_.mpSize < 2)
        continue;
      ++sharded;
      const std::vector<float> full = initParam(s);
      dmuon_status_t st = dmuon_runtime_bind_param(rt.get(), s.name.c_str(), full.data(), s.numel);
      if (st != DMUON_ERROR_INVALID_ARGUMENT)
        fail("[%s] bind_param('%s') with the global numel %" PRId64 " returned %s, expected "
             "INVALID_ARGUMENT (the local shard has %" PRId64 ")",
             topo_.text.c_str(), s.name.c_str(), s.numel, dmuon_status_string(st),
             host_.local(s.name).numel);
      else if (std::string(dmuon_runtime_last_error(rt.get())).empty())
        fail("[%s] bind_param('%s') refused without a message", topo_.text.c_str(), s.name.c_str());
    }
    for (const Spec &s : specs_) {
      const std::vector<float> local = host_.localInit(s);
      rt.bindParam(s.name, local.data(), static_cast<int64_t>(local.size()));
      // The C ABI alone tells a host which slice that is.
      dmuon_param_slice_t slice{};
      slice.struct_size = sizeof slice;
      slice.version = DMUON_PARAM_SLICE_VERSION;
      const dmuon_status_t sliced =
          dmuon_plan_param_slice(plan_.get(), plan_.findParam(s.name), gRank, &slice);
      if (s.splitFactor > 1 && topo_.mpSize > 1) { // several runs: no one box to say
        if (sliced != DMUON_ERROR_UNSUPPORTED ||
            std::string(dmuon_last_error()).find("StridedShard") == std::string::npos)
          fail("[%s] param_slice('%s') of a StridedShard param returned %s (%s), expected "
               "UNSUPPORTED naming StridedShard",
               topo_.text.c_str(), s.name.c_str(), dmuon_status_string(sliced),
               dmuon_last_error());
        continue;
      }
      if (sliced != DMUON_SUCCESS) {
        fail("[%s] param_slice('%s'): %s", topo_.text.c_str(), s.name.c_str(), dmuon_last_error());
        continue;
      }
      const Spec &l = host_.local(s.name);
      for (size_t k = 0; k < s.shape.size(); ++k) {
        const int64_t wantOffset =
            static_cast<int>(k) == s.shardDim
                ? runsOf(s.shape, s.shardDim, topo_.mpSize, 1, topo_.mp).front().offset
                : 0;
        if (slice.shape[k] != l.shape[k] || slice.offset[k] != wantOffset)
          fail("[%s] param_slice('%s') dim %zu: shape %" PRId64 " offset %" PRId64
               ", expected %" PRId64 " at %" PRId64,
               topo_.text.c_str(), s.name.c_str(), k, slice.shape[k], slice.offset[k],
               l.shape[k], wantOffset);
      }
      if (slice.numel != static_cast<int64_t>(local.size()))
        fail("[%s] param_slice('%s') numel %" PRId64 ", bound %zu", topo_.text.c_str(),
             s.name.c_str(), slice.numel, local.size());
    }
    for (const Spec &s : specs_) {
      if (s.shardDim < 0 || topo_.mpSize < 2)
        continue;
      std::vector<float> out(static_cast<size_t>(s.numel));
      dmuon_status_t st = dmuon_runtime_gather_param(rt.get(), s.name.c_str(), out.data(), s.numel);
      if (st != DMUON_ERROR_INVALID_ARGUMENT)
        fail("[%s] gather_param('%s') into the global numel returned %s, expected "
             "INVALID_ARGUMENT",
             topo_.text.c_str(), s.name.c_str(), dmuon_status_string(st));
    }
    if (gFailures == before && sharded > 0)
      info("[%s] %d sharded params: bind_param / gather_param of the global size are refused",
           topo_.text.c_str(), sharded);
  }

  Trajectory run(const RunSpec &spec) {
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt;
    dmuon_runtime_options_init(&opt); // hyper-parameters: the plan's
    opt.backend = DMUON_BACKEND_MPI;
    opt.communicator = &comm;
    opt.mode = spec.mode;
    opt.replicate_async = spec.replicateAsync;
    dmuon::Runtime rt(plan_, opt);
    host_.bindInitial(rt);
    Trajectory tr;
    tr.initial = host_.reassembleAll(rt);
    for (int step = 0; step < kSteps; ++step) {
      if (spec.checks)
        rt.resetCommCounters();
      const float loss = host_.trainStep(rt, step, [&] {
        if (spec.checks) {
          rt.finishBackward();
          checkI3(rt, spec, step);
        }
      });
      tr.norms.push_back(rt.gradNorm().total);
      if (spec.checks) {
        rt.synchronize();
        checkCounters(rt, spec, step);
        checkI1I2I4(rt, spec, step);
      }
      tr.losses.push_back(loss);
    }
    rt.synchronize();
    tr.final = host_.reassembleAll(rt);
    return tr;
  }

private:
  // Whether the param's owner picks a coordinate on the model-parallel dim:
  // it carries data and the param is Replicate on it (docs/dmuonc.md, "Data-
  // carrying dims"); owner_rank then names that coordinate.
  bool ownedAcrossMp(const dmuon_param_info_t &p) const {
    return topo_.mpCarriesData && host_.local(p.name).shardDim < 0;
  }
  int ownerMp(const dmuon_param_info_t &p) const {
    return ownedAcrossMp(p) ? topo_.coordOf(p.owner_rank)[static_cast<size_t>(topo_.mpDim)] : 0;
  }
  // Ranks in one owner's column: dp_replicate, and the model-parallel dim
  // when the owner spans it.
  uint64_t columnSize(const dmuon_param_info_t &p) const {
    return static_cast<uint64_t>(topo_.R) *
           static_cast<uint64_t>(ownedAcrossMp(p) ? topo_.mpSize : 1);
  }
  bool isOwnerHere(const dmuon_param_info_t &p) const {
    return p.owner_shard == topo_.shard && p.owner_replicate == topo_.replicate &&
           (!ownedAcrossMp(p) || ownerMp(p) == topo_.mp);
  }

  std::string where() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "(shard %d, replicate %d, %s %d)", topo_.shard, topo_.replicate,
                  topo_.mpName.c_str(), topo_.mp);
    return buf;
  }

  void checkI3(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    for (const dmuon_param_info_t &p : host_.muon()) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      if ((s.has_reduced_grad != 0) != owner)
        fail("[%s %s] step %d, after finish_backward: I3: %s has_reduced_grad=%d but this rank "
             "%s %s in the owner slot (%d,%d)",
             topo_.text.c_str(), spec.label, step, p.name, s.has_reduced_grad, where().c_str(),
             owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
    }
  }

  void checkI1I2I4(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    std::vector<uint64_t> sums;
    for (const dmuon_param_info_t &p : host_.muon()) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      const bool column = p.owner_shard == topo_.shard;
      if ((s.is_owner != 0) != owner)
        fail("[%s %s] step %d: I1: %s is_owner=%d, but this rank %s %s in its owner slot "
             "(%d,%d)",
             topo_.text.c_str(), spec.label, step, p.name, s.is_owner, where().c_str(),
             owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
      if ((s.has_owned_data != 0) != column)
        fail("[%s %s] step %d: I2: %s has_owned_data=%d, but this rank %s %s on the owner's "
             "shard %d",
             topo_.text.c_str(), spec.label, step, p.name, s.has_owned_data, where().c_str(),
             column ? "is" : "is not", p.owner_shard);
      if ((s.has_momentum != 0) != owner)
        fail("[%s %s] step %d: %s has_momentum=%d on a rank %s that %s in the owner slot",
             topo_.text.c_str(), spec.label, step, p.name, s.has_momentum, where().c_str(),
             owner ? "is" : "is not");
      if (column && s.owned_checksum == 0)
        fail("[%s %s] step %d: I4: %s owned_checksum is 0 on a rank holding owned data",
             topo_.text.c_str(), spec.label, step, p.name);
      if (!column && s.owned_checksum != 0)
        fail("[%s %s] step %d: %s owned_checksum=0x%016" PRIx64 " on a rank without owned data",
             topo_.text.c_str(), spec.label, step, p.name, s.owned_checksum);
      sums.push_back(s.owned_checksum);
    }
    // I4 per model-parallel coordinate: down the owner's shard column, every
    // replica at coordinate m holds the global owner at m's checksum.
    const size_t n = sums.size();
    std::vector<uint64_t> all(n * static_cast<size_t>(gWorld));
    MPI_Allgather(sums.data(), static_cast<int>(n), MPI_UINT64_T, all.data(), static_cast<int>(n),
                  MPI_UINT64_T, MPI_COMM_WORLD);
    if (gRank != 0)
      return;
    for (size_t i = 0; i < n; ++i) {
      const dmuon_param_info_t &p = host_.muon()[i];
      for (int m = 0; m < topo_.mpSize; ++m) {
        const int owner = topo_.rankAt(p.owner_shard, p.owner_replicate, m);
        const uint64_t ref = all[static_cast<size_t>(owner) * n + i];
        for (int r = 0; r < topo_.R; ++r) {
          const int peer = topo_.rankAt(p.owner_shard, r, m);
          const uint64_t got = all[static_cast<size_t>(peer) * n + i];
          if (got != ref)
            fail("[%s %s] step %d: I4: %s checksum 0x%016" PRIx64 " on rank %d differs from "
                 "the owner rank %d's 0x%016" PRIx64 " (%s %d)",
                 topo_.text.c_str(), spec.label, step, p.name, got, peer, owner, ref,
                 topo_.mpName.c_str(), m);
        }
      }
    }
  }

  // This rank's bytes per step from the param table and the accounting rule
  // of docs/plan-format.md, independently of the plan's stats: as in
  // mpi_test.cpp with P = the largest local slice's fp32 bytes (every rank
  // moves that much, its own slice padded), within the rank's own
  // model-parallel coordinate; the packed buffers' broadcast and reduce move
  // it rounded up to the 256-byte alignment (Pa). The gather/scatter of a comm param owned
  // by this rank's slot depends on which coordinate runs NS (the plan's
  // compute index, not in the C API), so only its sum is predicted here:
  // per such param a rank either sends P (gather) and receives P (scatter),
  // or receives (K-1)P and sends (K-1)P; `commOwned` counts them.
  dmuon_comm_counters_t predict(dmuon_mode_t mode, uint64_t &commOwnedBytes) const {
    dmuon_comm_counters_t c{};
    const uint64_t G = static_cast<uint64_t>(topo_.G), R = static_cast<uint64_t>(topo_.R);
    const uint64_t passes = mode == DMUON_MODE_Z2 ? 1 : 2;
    commOwnedBytes = 0;
    for (const Spec &s : specs_) {
      const dmuon_param_info_t &p = host_.info(s.name);
      const uint64_t P = static_cast<uint64_t>(host_.largestNumel(s.name)) * sizeof(float);
      const uint64_t Pa = (P + 255) / 256 * 256;
      // A replicated adamw param is summed along a data-carrying dim it is
      // Replicate on by an all-reduce; a Muon param's owner column spans it.
      const bool alongData = topo_.mpCarriesData && topo_.mpSize > 1 && s.shardDim < 0;
      if (p.role != DMUON_ROLE_MUON) {
        const uint64_t n = (G * R > 1 ? 1 : 0) + (alongData ? 1 : 0);
        c.kinds[DMUON_COLLECTIVE_ALLREDUCE].sent += n * P;
        c.kinds[DMUON_COLLECTIVE_ALLREDUCE].received += n * P;
        continue;
      }
      const uint64_t C = columnSize(p);
      const bool column = p.owner_shard == topo_.shard;
      const bool owner = isOwnerHere(p);
      if (column) {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].sent += passes * (G - 1) * Pa;
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (G - 1) * Pa;
      } else {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].received += passes * Pa;
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += Pa;
      }
      if (owner) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (C - 1) * Pa;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].sent += (C - 1) * P;
      } else if (column) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += Pa;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].received += P;
      }
      // A comm param: sharded on one of the two matrix dims.
      const bool comm = s.shardDim >= 0 && s.shardDim >= static_cast<int>(s.shape.size()) - 2;
      if (owner && comm && topo_.mpSize > 1)
        commOwnedBytes += P;
    }
    return c;
  }

  void checkCounters(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    const dmuon_comm_counters_t got = rt.commCounters();
    const dmuon_comm_counters_t want = rt.plannedCounters();
    uint64_t commOwned = 0;
    const dmuon_comm_counters_t mine = predict(spec.mode, commOwned);
    const std::string &m = topo_.text;
    if (step == 0) {
      uint64_t total = 0;
      for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
        total += want.kinds[k].sent + want.kinds[k].received;
      for (int k = 0; k < DMUON_COLLECTIVE_GATHER; ++k) {
        if (want.kinds[k].sent != mine.kinds[k].sent || want.kinds[k].received != mine.kinds[k].received)
          fail("[%s %s] %s: dmuon_runtime_planned_counters says sent %" PRIu64
               " / received %" PRIu64 ", the param table and the accounting rule give %" PRIu64
               " / %" PRIu64,
               m.c_str(), spec.label, kKinds[k], want.kinds[k].sent, want.kinds[k].received, mine.kinds[k].sent,
               mine.kinds[k].received);
      }
      if (gWorld > 1 && total == 0)
        fail("[%s %s] the plan predicts no communication at all", m.c_str(), spec.label);
      // Gather/scatter: per comm param owned by this slot, P either way.
      const uint64_t K1 = static_cast<uint64_t>(std::max(1, topo_.mpSize - 1));
      const uint64_t gs = want.kinds[DMUON_COLLECTIVE_GATHER].sent,
                     gr = want.kinds[DMUON_COLLECTIVE_GATHER].received,
                     ss = want.kinds[DMUON_COLLECTIVE_SCATTER].sent,
                     sr = want.kinds[DMUON_COLLECTIVE_SCATTER].received;
      if (gs + gr / K1 != commOwned || gr % K1 != 0)
        fail("[%s %s] gather: the plan predicts sent %" PRIu64 " / received %" PRIu64
             ", but this rank's slot owns %" PRIu64 " bytes of comm shards (sent P or received "
             "(K-1)P each)",
             m.c_str(), spec.label, gs, gr, commOwned);
      if (ss != gr || sr != gs)
        fail("[%s %s] scatter sent/received %" PRIu64 "/%" PRIu64
             " do not mirror gather received/sent %" PRIu64 "/%" PRIu64,
             m.c_str(), spec.label, ss, sr, gr, gs);
      if (topo_.mpName == "tp" && topo_.mpSize > 1) {
        // Over the whole world some rank gathers, and gathered bytes balance.
        uint64_t mineG[2] = {gs, gr}, sumG[2] = {0, 0};
        MPI_Allreduce(mineG, sumG, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (sumG[0] == 0 || sumG[0] != sumG[1])
          fail("[%s %s] gather bytes over all ranks: sent %" PRIu64 ", received %" PRIu64,
               m.c_str(), spec.label, sumG[0], sumG[1]);
      }
      if (gRank == 0) {
        std::printf("[%s %s] rank 0 bytes per step (sent/received):", m.c_str(), spec.label);
        for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
          std::printf(" %s %" PRIu64 "/%" PRIu64, kKinds[k], got.kinds[k].sent, got.kinds[k].received);
        std::printf("\n");
      }
    }
    for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
      if (got.kinds[k].sent != want.kinds[k].sent)
        fail("[%s %s] step %d: %s bytes sent %" PRIu64 ", the plan predicts %" PRIu64, m.c_str(),
             spec.label, step, kKinds[k], got.kinds[k].sent, want.kinds[k].sent);
      if (got.kinds[k].received != want.kinds[k].received)
        fail("[%s %s] step %d: %s bytes received %" PRIu64 ", the plan predicts %" PRIu64,
             m.c_str(), spec.label, step, kKinds[k], got.kinds[k].received, want.kinds[k].received);
    }
  }

  const dmuon::Plan &plan_;
  std::vector<Spec> specs_;
  const Topology &topo_;
  MpHost host_;
};

} // namespace

#endif
