// Executes a plan on one rank: param ownership, the per-hook-group lifecycle
// of spec 000 §4 (unshard / reshard / reduce / owner-only step / replicate
// broadcast), and the counters tests and benchmarks read. Backend-agnostic.
#ifndef DMUON_RUNTIME_CORE_EXECUTOR_H
#define DMUON_RUNTIME_CORE_EXECUTOR_H

#include "backends/Backend.h"
#include "core/Device.h"
#include "core/LoadedPlan.h"
#include "core/Status.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace dmuon::rt {

class Executor {
public:
  static Status create(const LoadedPlan &plan, const dmuon_runtime_options_t &options,
                       std::unique_ptr<Backend> backend, std::unique_ptr<Device> device,
                       std::unique_ptr<Executor> &out);

  Status bindParam(const std::string &name, const float *values, int64_t numel);
  Status paramView(const std::string &name, void **out);
  Status gradView(const std::string &name, float **out);

  Status preForward(int g);
  Status postForward(int g);
  Status preBackward(int g);
  Status postBackward(int g);
  Status finishBackward();
  Status step();
  Status synchronize();

  Status gatherParam(const std::string &name, float *out, int64_t numel);
  Status saveCheckpoint(const std::string &dir, int64_t step);
  Status loadCheckpoint(const std::string &dir, int64_t *step);
  Status paramState(const std::string &name, dmuon_param_state_t &out) const;
  const dmuon_comm_counters_t &counters() const { return counters_; }
  void resetCounters() { counters_ = {}; }
  dmuon_comm_counters_t plannedCounters() const;
  double nsFlops() const { return nsFlops_; }

private:
  struct ParamRt {
    const dmuon::plan::Param *plan = nullptr;
    std::string name;
    bool muon = false;
    int64_t numel = 0;
    int group = -1;
    int so = -1, ro = -1; // owner slot
    // Model-parallel: the local matrix view, and for comm params the group
    // that gathers the full matrix for NS and who in it runs NS.
    int64_t localBatch = 1, localRows = 0, localCols = 0;
    bool comm = false;
    CommGroup gatherGroup = CommGroup::World;
    int gatherSize = 1, gatherCoord = 0, computeIndex = 0;
    int64_t concatOuter = 1, concatInner = 1, concatLocal = 1; // along the gathered dim
    bool isOwner = false, keepsMaster = false, bound = false;
    DeviceArray master, momentum, reducedGrad; // muon
    DeviceArray value, adamM, adamV;           // adamw (replicated)
    size_t gradOffset = 0;                            // adamw: into adamwGrad_
  };
  struct SegmentRt {
    int so = 0, ro = 0;
    int64_t offset = 0, bytes = 0, reduceOffset = 0, reduceBytes = 0;
    int64_t masterElements = 0;
    std::vector<int> params;
  };
  enum class Unshard { Sharded, InFlight, Unsharded };
  struct PendingReplicate {
    int segment;
    DeviceArray staging;
    RequestId request;
  };
  struct GroupRt {
    std::string name;
    std::vector<SegmentRt> segments;
    int64_t bufferBytes = 0, reduceBufferBytes = 0;
    DeviceArray packed, grad;
    Unshard state = Unshard::Sharded;
    std::vector<RequestId> broadcasts, phase1, phase2;
    std::vector<PendingReplicate> replicate;
    bool forwardStarted = false, forwardDone = false;
    bool backwardStarted = false, backwardDone = false;
  };

  Executor() = default;
  Status init(const LoadedPlan &plan, const dmuon_runtime_options_t &options);
  Status findParam(const std::string &name, int &index) const;
  Status checkGroup(int g, const char *call) const;
  void count(dmuon_collective_t kind, uint64_t sent, uint64_t received);

  Status unshard(int g);
  Status waitUnshard(int g);
  void reshard(int g);
  Status pack(const SegmentRt &seg, uint8_t *dst);
  Status waitReplicate(int g);
  Status issuePhase2(int g);
  bool midStep() const;
  uint64_t optionsHash() const;
  uint64_t modelFingerprint() const;
  std::vector<const dmuon::plan::Param *> planParams() const;
  Status agree(const Status &local, const std::string &what);
  Status stepAdamW();
  Status stepGathered(ParamRt &p);
  Status broadcastReplicas();

  // Declared first so it is destroyed last: every DeviceArray below frees
  // through it.
  std::unique_ptr<Device> device_;
  const LoadedPlan *plan_ = nullptr;
  int rank_ = 0, G_ = 1, R_ = 1, s_ = 0, r_ = 0, planNsSteps_ = 5;
  bool z3_ = true, replicateAsync_ = true, manageAdamW_ = true, planZ3_ = true;
  MuonHyper muon_;
  AdamWHyper adamw_;

  std::vector<ParamRt> params_;
  std::vector<GroupRt> groups_;
  std::vector<int> adamwParams_;
  DeviceArray adamwGrad_;
  DeviceArray gatherScratch_[4]; // stepGathered: u, ortho, chunks, full
  size_t adamwElements_ = 0;
  std::deque<int> phase2Queue_;
  bool allBound_ = false, started_ = false, backwardFinished_ = false;
  int64_t adamwStep_ = 0;
  double nsFlops_ = 0;
  dmuon_comm_counters_t counters_{};
  // Declared last so it is destroyed first: it completes pending collectives
  // before the buffers they touch are freed.
  std::unique_ptr<Backend> backend_;
};

} // namespace dmuon::rt

#endif
