// docs/cluster-format.md, "What is simulated", says what each program holds
// and which simplifications it makes.
#include "sim/Programs.h"
#include "common/MatrixOptimizers.h"
#include "common/MeshIndex.h"
#include "common/PlanRules.h"
#include "common/RankRows.h"

#include <algorithm>
#include <memory>

namespace dmuon::sim {

// ------------------------------------------------------------------ mesh

MeshView MeshView::of(const plan::Plan &p, int64_t devicesPerNode) {
  MeshView m(p);
  m.world = m.ranks();
  m.devicesPerNode = std::max<int64_t>(1, devicesPerNode);
  return m;
}

int64_t MeshView::groupSize(const std::vector<int> &dims) const {
  int64_t n = 1;
  for (int d : dims)
    n *= this->dims[static_cast<size_t>(d)];
  return n;
}

// The group's lowest and highest ranks (its coordinates on `dims` at 0 and
// at their ends) are on the same node exactly when every member is: ranks
// grow with each coordinate.
bool MeshView::spansNodes(int64_t rank, const std::vector<int> &dims) const {
  std::vector<int64_t> lo = coord(rank), hi = lo;
  for (int d : dims) {
    lo[static_cast<size_t>(d)] = 0;
    hi[static_cast<size_t>(d)] = this->dims[static_cast<size_t>(d)] - 1;
  }
  return common::rowMajorRank(this->dims, lo) / devicesPerNode !=
         common::rowMajorRank(this->dims, hi) / devicesPerNode;
}

std::vector<int> MeshView::shardDims() const {
  return shardDim >= 0 ? std::vector<int>{shardDim} : std::vector<int>{};
}
std::vector<int> MeshView::replicateDims() const {
  return replicateDim >= 0 ? std::vector<int>{replicateDim} : std::vector<int>{};
}
std::vector<int> MeshView::dataParallelDims() const {
  std::vector<int> dims;
  for (int i = 0; i < static_cast<int>(this->dims.size()); ++i)
    if (i == shardDim || i == replicateDim || carriesData[static_cast<size_t>(i)])
      dims.push_back(i);
  return dims;
}

std::vector<int> segmentColumnDims(const plan::Plan &p, const plan::Segment &seg,
                                   const MeshView &mesh) {
  std::vector<int> dims = mesh.replicateDims();
  if (!seg.params() || seg.params()->size() == 0 || !p.params())
    return dims;
  const plan::Param *first = p.params()->Get(seg.params()->Get(0));
  if (first->data_dims())
    for (int d : *first->data_dims())
      if (d >= 0 && d < static_cast<int>(mesh.dims.size()))
        dims.push_back(d);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// ---------------------------------------------------------------- digest

namespace {

double localElements(const plan::Param &p) {
  const auto *shape = p.local_shape() && p.local_shape()->size() ? p.local_shape() : p.shape();
  double n = 1;
  if (shape)
    for (int64_t d : *shape)
      n *= static_cast<double>(d);
  return n;
}

// The matrices Newton-Schulz runs for `q`: a comm param's gathered full
// matrices, else its local ones (compiler/passes/Partition.cpp prices the
// same), and seconds for all of them on `c`'s device.
double nsSecondsOf(const plan::Param &q, const Cluster &c) {
  const bool comm = q.gather_mesh_dim() >= 0;
  const int64_t rows = comm || q.local_rows() <= 0 ? q.rows() : q.local_rows();
  const int64_t cols = comm || q.local_cols() <= 0 ? q.cols() : q.local_cols();
  const double batch = static_cast<double>(std::max<int64_t>(1, q.local_batch()));
  return batch * c.device.nsSeconds(rows, cols, q.cost() / batch);
}

// The seconds of the NS `rank` runs: the plan's NS flops at the device's
// rate, or per matrix from the cluster's cost table when it has one.
double rankNsSeconds(const plan::Plan &p, const MeshView &mesh, const Cluster &c, int64_t rank,
                     double nsFlops) {
  if (c.device.nsTable.empty() || !p.params())
    return nsFlops / c.device.nsFlops();
  const std::vector<int64_t> coord = mesh.coord(rank);
  double seconds = 0;
  for (const plan::Param *q : *p.params())
    if (runsNs(*q, mesh, coord))
      seconds += nsSecondsOf(*q, c);
  return seconds;
}

// NS on every Muon matrix (the naive baselines): of the digest's stage, when
// it has one.
double allNsSeconds(const plan::Plan &p, const PlanDigest &d, const Cluster &c) {
  if (c.device.nsTable.empty() || !p.params())
    return d.muonNsFlops / c.device.nsFlops();
  double seconds = 0;
  for (const plan::Param *q : *p.params())
    if (q->role() == plan::Role::muon && q->route() != plan::Route::host &&
        (d.stage < 0 || q->pipeline_stage() == d.stage))
      seconds += nsSecondsOf(*q, c);
  return seconds;
}

} // namespace

bool runsNs(const plan::Param &q, const MeshView &mesh, const std::vector<int64_t> &coord) {
  if (q.role() != plan::Role::muon || q.route() != plan::Route::owner || q.owner_rank() < 0 ||
      q.owner_rank() >= mesh.world)
    return false;
  const std::vector<int64_t> owner = mesh.coord(q.owner_rank());
  std::vector<int> dims = mesh.shardDims();
  for (int d : mesh.replicateDims())
    dims.push_back(d);
  if (q.data_dims())
    for (int d : *q.data_dims())
      if (d >= 0 && d < static_cast<int>(mesh.dims.size()))
        dims.push_back(d);
  // owner_rank has every other dim at 0, the stage dim at the param's stage
  // (1.9): a rank of another stage never steps it.
  if (mesh.stageDim >= 0)
    dims.push_back(mesh.stageDim);
  for (int d : dims)
    if (coord[static_cast<size_t>(d)] != owner[static_cast<size_t>(d)])
      return false;
  const int g = q.gather_mesh_dim();
  return g < 0 || g >= static_cast<int>(mesh.dims.size()) ||
         coord[static_cast<size_t>(g)] == q.compute_index();
}

std::unique_ptr<PlanDigest> digestPlan(const plan::Plan &p, const MeshView &mesh, int64_t stage) {
  auto d = std::make_unique<PlanDigest>();
  d->stage = stage;
  const int64_t G = mesh.shardDim >= 0 ? mesh.dims[static_cast<size_t>(mesh.shardDim)] : 1;
  const size_t n = p.hook_groups() ? p.hook_groups()->size() : 0;
  d->groups.resize(n);
  d->columns.assign(static_cast<size_t>(G), std::vector<std::vector<ColumnTraffic>>(n));
  if (p.params())
    for (const plan::Param *q : *p.params()) {
      const double el = localElements(*q);
      const double vb = el * static_cast<double>(common::dtypeBytes(q->dtype()));
      if (q->route() == plan::Route::host)
        continue; // the host's own
      if (stage >= 0 && q->pipeline_stage() != stage)
        continue;
      d->elements += el;
      d->valueBytes += vb;
      if (q->role() == plan::Role::muon) {
        d->muonElements += el;
        d->muonNsFlops += q->cost();
        if (q->gather_mesh_dim() >= 0 &&
            q->gather_mesh_dim() < static_cast<int>(mesh.dims.size()))
          d->gatherSize = mesh.dims[static_cast<size_t>(q->gather_mesh_dim())];
      }
      const int g = q->hook_group();
      if (g < 0 || static_cast<size_t>(g) >= n) {
        d->ungroupedElements += el;
        continue;
      }
      PlanDigest::Group &grp = d->groups[static_cast<size_t>(g)];
      grp.elements += el;
      grp.valueBytes += vb;
      if (q->role() == plan::Role::muon)
        grp.muonElements += el;
      if (q->route() == plan::Route::sharded) {
        grp.allGather.add(static_cast<double>(q->bytes()));
        grp.reduceScatter.add(static_cast<double>(q->reduce_bytes()));
        grp.shardSum.add(static_cast<double>(q->shard_elements()) * 4);
      }
    }
  for (size_t g = 0; g < n; ++g) {
    const plan::HookGroup *hg = p.hook_groups()->Get(static_cast<unsigned>(g));
    if (!hg->segments() || (stage >= 0 && hg->pipeline_stage() != stage))
      continue;
    for (const plan::Segment *seg : *hg->segments()) {
      PlanDigest::Group &grp = d->groups[g];
      grp.broadcast.add(static_cast<double>(seg->bytes()));
      grp.reduce.add(static_cast<double>(seg->reduce_bytes()));
      const int64_t s = seg->owner_shard();
      if (s < 0 || s >= G)
        continue;
      double master = 0; // fp32 masters: what the replicate broadcast carries
      if (seg->params())
        for (int i : *seg->params())
          master += localElements(*p.params()->Get(static_cast<unsigned>(i))) * 4;
      std::vector<int> dims = segmentColumnDims(p, *seg, mesh);
      std::vector<ColumnTraffic> &cols = d->columns[static_cast<size_t>(s)][g];
      auto it = std::find_if(cols.begin(), cols.end(),
                             [&](const ColumnTraffic &c) { return c.dims == dims; });
      if (it == cols.end())
        it = cols.insert(cols.end(), ColumnTraffic{dims, {}, {}});
      it->reduce.add(static_cast<double>(seg->reduce_bytes()));
      it->replicate.add(master);
    }
  }
  return d;
}

// -------------------------------------------------------------- compute

ComputeSplit splitCompute(const plan::Plan &p, const Cluster &c) {
  ComputeSplit out;
  const MeshView mesh = MeshView::of(p, c.devicesPerNode);
  std::unique_ptr<PlanDigest> d = digestPlan(p, mesh);
  std::vector<double> weight;
  if (p.hook_groups() && p.hook_groups()->size()) {
    for (size_t g = 0; g < d->groups.size(); ++g) {
      out.names.push_back(p.hook_groups()->Get(static_cast<unsigned>(g))->name()->str());
      weight.push_back(d->groups[g].elements);
    }
  } else {
    out.names.push_back("<model>");
    weight.push_back(1);
  }
  double fwd = 0, bwd = 0;
  const Workload &w = c.workload;
  if (w.kind == Workload::Kind::Seconds) {
    fwd = w.forwardSeconds;
    bwd = w.backwardSeconds;
  } else if (w.kind == Workload::Kind::Flops) {
    // 6 flops per param per token (2 forward, 4 backward), on this rank's
    // local params; docs/cluster-format.md.
    out.flopsPerToken = w.flopsPerToken > 0 ? w.flopsPerToken : 6 * d->elements;
    const double seconds = out.flopsPerToken * w.tokensPerRank /
                           (c.device.matmulFlops[static_cast<int>(w.computeDType)] * w.mfu);
    fwd = seconds / 3;
    bwd = seconds - fwd;
  }
  double total = 0;
  for (double x : weight)
    total += x;
  for (double x : weight) {
    const double share = total > 0 ? x / total : 1.0 / static_cast<double>(weight.size());
    out.forward.push_back(fwd * share);
    out.backward.push_back(bwd * share);
  }
  return out;
}

// ------------------------------------------------------------- programs

void restrictToStage(Program &prog, const plan::Plan &p, int64_t stage, int64_t stages) {
  if (!p.hook_groups() || p.hook_groups()->size() != prog.groups.size())
    return; // the pseudo-group of a plan without hook groups: no stages to tell apart
  std::vector<GroupWork> kept;
  for (size_t g = 0; g < prog.groups.size(); ++g)
    if (p.hook_groups()->Get(static_cast<unsigned>(g))->pipeline_stage() == stage) {
      GroupWork w = std::move(prog.groups[g]);
      w.forward *= static_cast<double>(stages);
      w.backward *= static_cast<double>(stages);
      kept.push_back(std::move(w));
    }
  prog.groups = std::move(kept);
}

namespace {

// The per-element bytes an optimizer update reads and writes (fp32): Muon
// reads the gradient, momentum and master and writes momentum and master;
// AdamW also reads and writes its second moment.
constexpr double kMuonUpdateBytes = 20, kAdamUpdateBytes = 28;
constexpr double kNormBytes = 16; // the gradient norm's two double sums

Transfer transfer(CollKind kind, const MeshView &mesh, int64_t rank, const std::vector<int> &dims,
                  const Traffic &t) {
  return {kind, mesh.groupSize(dims), t.bytes, mesh.spansNodes(rank, dims), t.count};
}

Transfer transfer(CollKind kind, const MeshView &mesh, int64_t rank, const std::vector<int> &dims,
                  double bytes) {
  return transfer(kind, mesh, rank, dims, Traffic{bytes, 1});
}

void addCompute(Program &prog, const ComputeSplit &split) {
  for (size_t g = 0; g < split.names.size(); ++g) {
    GroupWork w;
    w.name = split.names[g];
    w.forward = split.forward[g];
    w.backward = split.backward[g];
    w.unshard.stream = Stream::Unshard;
    w.phase1.stream = Stream::Reduce;
    w.phase2.stream = Stream::Replicate;
    w.replicate.stream = Stream::Replicate;
    prog.groups.push_back(std::move(w));
  }
}

StepItem computeItem(std::string label, double seconds) {
  StepItem it;
  it.kind = StepItem::Kind::Compute;
  it.label = std::move(label);
  it.seconds = seconds;
  return it;
}

StepItem commItem(std::string label, Stream stream, Transfer t, bool global) {
  StepItem it;
  it.kind = StepItem::Kind::Comm;
  it.label = std::move(label);
  it.comm.stream = stream;
  it.comm.parts.push_back(t);
  it.global = global;
  return it;
}

} // namespace

Program dmuonProgram(const plan::Plan &p, const PlanDigest &d, const MeshView &mesh,
                     const Cluster &c, const ComputeSplit &split, int64_t rank,
                     std::optional<int64_t> refreshStep) {
  Program prog;
  const plan::Options *o = p.options();
  prog.z3 = !o || o->mode() == plan::Mode::z3;
  prog.replicateAsync = !o || o->replicate_async();
  addCompute(prog, split);
  const std::vector<int64_t> coord = mesh.coord(rank);
  const int64_t s = mesh.shardDim >= 0 ? coord[static_cast<size_t>(mesh.shardDim)] : 0;
  const std::vector<int> shard = mesh.shardDims(), repl = mesh.replicateDims();
  for (size_t g = 0; g < d.groups.size(); ++g) {
    const PlanDigest::Group &grp = d.groups[g];
    GroupWork &w = prog.groups[g];
    w.unshard.parts = {transfer(CollKind::Broadcast, mesh, rank, shard, grp.broadcast),
                       transfer(CollKind::AllGather, mesh, rank, shard, grp.allGather)};
    w.phase1.parts = {transfer(CollKind::Reduce, mesh, rank, shard, grp.reduce),
                      transfer(CollKind::ReduceScatter, mesh, rank, shard, grp.reduceScatter)};
    w.phase2.parts = {transfer(CollKind::AllReduce, mesh, rank, repl, grp.shardSum)};
    for (const ColumnTraffic &col : d.columns[static_cast<size_t>(s)][g]) {
      w.phase2.parts.push_back(transfer(CollKind::Reduce, mesh, rank, col.dims, col.reduce));
      w.replicate.parts.push_back(
          transfer(CollKind::Broadcast, mesh, rank, col.dims, col.replicate));
    }
  }
  const plan::RankFigures *f = common::RankRows(p).ofRank(rank);
  const std::vector<int> dp = mesh.dataParallelDims();
  std::vector<int> all(mesh.dims.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int>(i);
  // Executor::step: the replicated params' all-reduce and the gradient norm
  // (every rank), the owners' Muon step (model-parallel gather, NS,
  // scatter, update), the replicate broadcasts, then AdamW.
  if (f && f->allreduce_bytes() > 0)
    prog.step.push_back(commItem("all-reduce adamw grads", Stream::Reduce,
                                 transfer(CollKind::AllReduce, mesh, rank, dp,
                                          static_cast<double>(f->allreduce_bytes())),
                                 true));
  prog.step.push_back(commItem("all-reduce grad norm", Stream::Reduce,
                               transfer(CollKind::AllReduce, mesh, rank, all, kNormBytes), true));
  const int64_t K = d.gatherSize;
  auto mpBytes = [&](int64_t send, int64_t recv) {
    return K > 1 ? static_cast<double>(std::max(send, recv)) * static_cast<double>(K) /
                       static_cast<double>(K - 1)
                 : 0.0;
  };
  const double nsFlops = f ? f->ns_flops() : 0;
  prog.nsSeconds = rankNsSeconds(p, mesh, c, rank, nsFlops);
  if (refreshStep) {
    const RefreshPeriod period = refreshPeriod(p);
    const std::vector<Refresh> refreshes = rankRefreshes(p, mesh, c, rank);
    prog.nsSeconds = std::max(0.0, prog.nsSeconds - amortizedRefreshSeconds(refreshes, period) +
                                       refreshSecondsAt(refreshes, period, *refreshStep));
  }
  if (f && (f->gather_send_bytes() > 0 || f->gather_recv_bytes() > 0))
    prog.step.push_back(commItem("gather", Stream::Reduce,
                                 Transfer{CollKind::AllGather, K,
                                          mpBytes(f->gather_send_bytes(), f->gather_recv_bytes()),
                                          false, 1},
                                 false));
  prog.step.push_back(computeItem("newton-schulz", prog.nsSeconds));
  if (f && (f->scatter_send_bytes() > 0 || f->scatter_recv_bytes() > 0))
    prog.step.push_back(
        commItem("scatter", Stream::Reduce,
                 Transfer{CollKind::ReduceScatter, K,
                          mpBytes(f->scatter_send_bytes(), f->scatter_recv_bytes()), false, 1},
                 false));
  const double momentumElements = f ? static_cast<double>(f->momentum_bytes()) / 4 : 0;
  prog.step.push_back(computeItem("muon update", momentumElements * kMuonUpdateBytes /
                                                     c.device.memoryBandwidth));
  StepItem rep;
  rep.kind = StepItem::Kind::Replicate;
  prog.step.push_back(rep);
  const double adamElements = f ? static_cast<double>(f->adam_moment_bytes()) / 8 : 0;
  prog.step.push_back(
      computeItem("adamw update", adamElements * kAdamUpdateBytes / c.device.adamwBandwidth()));
  return prog;
}

const char *baselineName(Baseline b) {
  switch (b) {
  case Baseline::AdamW:
    return "adamw";
  case Baseline::NaiveAllReduce:
    return "naive muon: all-reduce";
  case Baseline::NaiveAllGather:
    return "naive muon: all-gather";
  }
  return "?";
}

// Every baseline rank does the same work; rank 0 stands for all of them.
Program baselineProgram(Baseline b, const plan::Plan &p, const PlanDigest &d,
                        const MeshView &mesh, const Cluster &c, const ComputeSplit &split) {
  Program prog;
  const plan::Options *o = p.options();
  prog.z3 = !o || o->mode() == plan::Mode::z3;
  addCompute(prog, split);
  const int64_t rank = 0;
  const std::vector<int> shard = mesh.shardDims(), repl = mesh.replicateDims();
  const std::vector<int> dp = mesh.dataParallelDims();
  std::vector<int> all(mesh.dims.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int>(i);
  const double G = static_cast<double>(mesh.groupSize(shard));
  const double D = static_cast<double>(mesh.groupSize(dp));
  const double bw = c.device.memoryBandwidth, abw = c.device.adamwBandwidth();
  const double adamElements = d.elements - d.muonElements;
  if (d.ungroupedElements > 0)
    prog.step.push_back(commItem("all-reduce ungrouped grads", Stream::Reduce,
                                 transfer(CollKind::AllReduce, mesh, rank, dp,
                                          d.ungroupedElements * 4),
                                 true));
  prog.step.push_back(commItem("all-reduce grad norm", Stream::Reduce,
                               transfer(CollKind::AllReduce, mesh, rank, all, kNormBytes), true));
  switch (b) {
  case Baseline::AdamW:
    // FSDP2 over dp_shard, all-reduced over dp_replicate (HSDP), as dmuon's
    // sharded route moves a param.
    for (size_t g = 0; g < d.groups.size(); ++g) {
      const PlanDigest::Group &grp = d.groups[g];
      GroupWork &w = prog.groups[g];
      w.unshard.parts = {transfer(CollKind::AllGather, mesh, rank, shard, grp.valueBytes)};
      w.phase1.parts = {
          transfer(CollKind::ReduceScatter, mesh, rank, shard, grp.elements * 4)};
      w.phase2.stream = Stream::Reduce;
      w.phase2.parts = {transfer(CollKind::AllReduce, mesh, rank, repl, grp.elements * 4 / G)};
    }
    prog.step.push_back(
        computeItem("adamw update", d.elements / G * kAdamUpdateBytes / abw));
    break;
  case Baseline::NaiveAllReduce:
    prog.pipelinedReduce = false;
    for (size_t g = 0; g < d.groups.size(); ++g)
      prog.groups[g].phase1.parts = {
          transfer(CollKind::AllReduce, mesh, rank, dp, d.groups[g].elements * 4)};
    prog.nsSeconds = allNsSeconds(p, d, c);
    prog.step.push_back(computeItem("newton-schulz", prog.nsSeconds));
    prog.step.push_back(computeItem("update", d.muonElements * kMuonUpdateBytes / bw +
                                                  adamElements * kAdamUpdateBytes / abw));
    break;
  case Baseline::NaiveAllGather:
    // Moonlight's Distributed Muon (ZeRO-1): reduce-scatter in backward;
    // the step all-gathers every Muon gradient, runs NS on all of them,
    // updates its shard and all-gathers the updated params.
    prog.pipelinedReduce = false;
    for (size_t g = 0; g < d.groups.size(); ++g)
      prog.groups[g].phase1.parts = {
          transfer(CollKind::ReduceScatter, mesh, rank, dp, d.groups[g].elements * 4)};
    prog.step.push_back(commItem("all-gather muon grads", Stream::Reduce,
                                 transfer(CollKind::AllGather, mesh, rank, dp,
                                          d.muonElements * 4),
                                 true));
    prog.nsSeconds = allNsSeconds(p, d, c);
    prog.step.push_back(computeItem("newton-schulz", prog.nsSeconds));
    prog.step.push_back(computeItem("update", (d.muonElements * kMuonUpdateBytes / bw +
                                               adamElements * kAdamUpdateBytes / abw) /
                                                  D));
    prog.step.push_back(commItem("all-gather params", Stream::Reduce,
                                 transfer(CollKind::AllGather, mesh, rank, dp, d.valueBytes),
                                 true));
    break;
  }
  return prog;
}

} // namespace dmuon::sim
