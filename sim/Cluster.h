// The cluster description that `dmuon-plan --simulate` prices a plan on
// (docs/cluster-format.md): devices per node, each device's matrix
// throughput, memory bandwidth and memory, the intra- and inter-node
// networks' bandwidth and latency per collective kind, and optionally the
// host's forward/backward time (the workload).
#ifndef DMUON_SIM_CLUSTER_H
#define DMUON_SIM_CLUSTER_H

#include "support/ByteSize.h"
#include "support/CostTable.h"
#include "support/Diagnostics.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dmuon::sim {

// The collective kinds a cluster prices separately; gather and scatter (the
// model-parallel NS of comm params) move data as all-gather and
// reduce-scatter do and are priced as those.
enum class CollKind { Broadcast, Reduce, AllReduce, AllGather, ReduceScatter };
inline constexpr int kNumCollKinds = 5;
const char *collKindKey(CollKind k); // "broadcast", "all_reduce", ...

// One collective kind on one network: NCCL-tests' bus bandwidth (bytes/s)
// and the latency of one algorithm step (s); docs/cluster-format.md,
// "Cost model".
struct LinkCost {
  double bandwidth = 0;
  double latency = 0;
};

struct Network {
  bool present = false;
  std::array<LinkCost, kNumCollKinds> kinds{};
  const LinkCost &cost(CollKind k) const { return kinds[static_cast<int>(k)]; }
};

// The dtypes a device's matrix throughput may be given for (the plan's).
enum class MatmulDType { f32, bf16, f16, f64 };
inline constexpr int kNumMatmulDTypes = 4;

struct Device {
  double memoryBytes = 0;
  double memoryBandwidth = 0; // bytes/s, for the element-wise optimizer work
  // AdamW's own, where its arithmetic (a square root and a division per
  // element) rather than memory bounds it, as on a CPU; 0: memoryBandwidth.
  double adamwMemoryBandwidth = 0;
  double adamwBandwidth() const {
    return adamwMemoryBandwidth > 0 ? adamwMemoryBandwidth : memoryBandwidth;
  }
  std::array<double, kNumMatmulDTypes> matmulFlops{}; // 0: not given
  MatmulDType nsDType = MatmulDType::bf16;             // what Newton-Schulz runs in
  double nsFlops() const { return matmulFlops[static_cast<int>(nsDType)]; }
  // ns_cost_table: measured NS seconds per matrix shape (the CSV dmuonc's
  // --cost-table reads); shapes it lacks are priced at nsFlops().
  CostTableMap nsTable;
  std::string nsTablePath; // as resolved (relative to the description)
  // Seconds of one NS of a rows x cols matrix doing `flops`.
  double nsSeconds(int64_t rows, int64_t cols, double flops) const;
};

// Forward and backward compute per step on every rank. Either given in
// seconds (split over the hook groups by their share of the params), or a
// flops model: flops_per_token (default 6 x the plan's param elements) x
// tokens_per_rank / (throughput of compute_dtype x mfu); backward is twice
// forward.
struct Workload {
  enum class Kind { None, Seconds, Flops } kind = Kind::None;
  double forwardSeconds = 0, backwardSeconds = 0;
  double tokensPerRank = 0, flopsPerToken = 0 /* 0: 6 x params */, mfu = 0;
  MatmulDType computeDType = MatmulDType::bf16;
};

// How a plan with pipeline stages runs its micro-batches (the [pipeline]
// table); plans without stages ignore it. 1F1B is Megatron-LM's default
// non-interleaved schedule; GPipe runs every forward before any backward.
// Both leave the same bubble, but GPipe holds every micro-batch's
// activations where 1F1B's stage k holds at most P - k.
enum class PipelineSchedule { OneFOneB, GPipe };
const char *pipelineScheduleName(PipelineSchedule s); // "1f1b", "gpipe"

// The schedule is simulated op by op, two per micro-batch and stage: 65536
// micro-batches is far past any batch (Llama 3's 16M tokens of 8K sequences
// are 2048) and still milliseconds on a few stages.
inline constexpr int64_t kMaxMicroBatches = 65536;
inline constexpr int64_t kMaxHiddenSize = int64_t(1) << 20;

struct PipelineConfig {
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  // 0: 4 x the plan's stages, the bubble (P-1)/(5P-1) below a fifth (the
  // Megatron-LM paper's advice: many more micro-batches than stages).
  int64_t microBatches = 0;
  // The width of the activations a stage sends the next; 0: the plan's
  // most common 1-D param length (the norms' hidden size).
  int64_t hiddenSize = 0;
};

struct Cluster {
  std::string name;
  int64_t devicesPerNode = 0;
  // One latency per coalesced group of collectives (NCCL's group calls run
  // them together), or one per collective (MPI's non-blocking calls).
  bool coalesced = true;
  // The processors (CPU cores) a node's ranks share; 0: one per device.
  // Ranks past it time-share: see Cluster::computeShare.
  int64_t processorsPerNode = 0;
  // oversubscribed_latency: seconds each wait on a collective costs a rank
  // when its node holds twice as many ranks as processors (the peers it
  // waits for must be scheduled first); see oversubscribedWait.
  double oversubscribedLatency = 0;
  Device device;
  Network intra, inter;
  Workload workload;
  PipelineConfig pipeline;
};

// The share of its device's compute a rank gets when `world` ranks run:
// processors_per_node / (ranks on a node) when a node holds more ranks than
// it has processors (MPI ranks oversubscribing a CPU), else 1.
double computeShare(const Cluster &c, int64_t world);
// Seconds the first wait on each collective adds when `world` ranks run:
// oversubscribed_latency x (ranks on a node / processors_per_node - 1) when
// a node holds more ranks than processors (one at twice as many), else 0.
double oversubscribedWait(const Cluster &c, int64_t world);
// `c` with every compute rate (matrix throughput, memory bandwidth, the
// workload's and the cost table's seconds) scaled to `share`.
Cluster withComputeShare(const Cluster &c, double share);

// Reads, parses and checks a cluster description, reporting every problem as
// "path:line:col: error: ..." with the source line. Returns false on error.
bool loadCluster(const std::string &path, Diagnostics &diags, Cluster &out);
// The same on text in memory; `name` stands for the file in diagnostics.
bool parseCluster(std::string_view text, const std::string &name, Diagnostics &diags,
                  Cluster &out);

using dmuon::parseByteSize; // support/ByteSize.h

// The largest cluster description read (a description is a page of TOML).
inline constexpr uint64_t kMaxClusterBytes = uint64_t(1) << 20;

} // namespace dmuon::sim

#endif
