// partition (docs/partition.md): units -> global LPT over all G*R owner slots ->
// owner slot per unit. Small params of one layer merge into one unit; units
// of one layer prefer distinct slots; a bounded refinement follows LPT.
// The placement over the fine slots of data-carrying dims is in
// passes/FineSlots.cpp, the default layers in passes/Blocks.cpp.
#include "Passes.h"
#include "kernels/NsForms.h"
#include "passes/FineSlots.h"
#include "passes/LowerBound.h"
#include "passes/Partitioner.h"
#include "passes/PartitionerDetail.h"
#include "support/CostTable.h"

#include "common/FirstSeenTable.h"
#include "common/MatrixBlocks.h"
#include "common/MatrixOptimizers.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace dmuon {

namespace {

// The plan's name for a form the kernels run.
plan::NsForm planForm(kernels::NsForm form) {
  switch (form) {
  case kernels::NsForm::Symmetric:
    return plan::NsForm::symmetric;
  case kernels::NsForm::Gram:
    return plan::NsForm::gram;
  default:
    return plan::NsForm::three_gemm;
  }
}

// The owner-routed params as the unit search reads them: every one (Muon
// params, and AdamW params riding with their layer's owners at partition
// cost 0), in model order, with what each attempt reads of it computed once.
struct OwnerParams {
  std::vector<int> params;    // indexes into PlanModel::params
  std::vector<int> layer;     // per entry: its layer id (Param::layerId)
  std::vector<int> dataClass; // per entry: index into classDims
  std::vector<bool> small;    // per entry: below --small-param-threshold
  // Per entry: its (layer id, data class) pair as one dense id, the unit its
  // small params fill; the layer id itself where there is one data class.
  std::vector<int> openId;
  size_t numOpenIds = 0;
  // The data classes: the data-carrying dims an owner-routed param is
  // Replicate on (its owner picks coordinates there; it runs on every
  // coordinate of the others, which shard it).
  std::vector<std::vector<int>> classDims;
  std::vector<double> cost; // per param of the model: its partition cost
  // Per Muon param, for the lower bound: its cost, and its fine slots' share.
  std::vector<double> muonCosts, muonCopies;
  std::vector<int> muonParams; // the param of each muonCosts entry
};

// Numbers the layer of every owner- and sharded-routed param (Param::layer,
// Param::layerId) in first-seen order: owner params first, in model order,
// then sharded params, which move with their layer's hook group. Returns
// the number of ids.
size_t numberLayers(PlanModel &model) {
  // One flat table, and each id's first layer string (a param's, or one
  // held in shardedLayers; it must outlive the table).
  common::FirstSeenTable layerTable(model.params.size());
  std::vector<const std::string *> layerIds;
  // A layer's params are usually adjacent: the previous param's id first.
  const std::string *previousLayer = nullptr;
  int previousLayerId = -1;
  auto layerIdOf = [&](const std::string &layer) {
    if (!previousLayer || *previousLayer != layer) {
      const auto fresh = static_cast<uint32_t>(layerIds.size());
      previousLayerId =
          static_cast<int>(layerTable.insert(common::FirstSeenTable::hashOf(layer), fresh,
                                             [&](uint32_t id) { return *layerIds[id] == layer; }));
      if (static_cast<uint32_t>(previousLayerId) == fresh)
        layerIds.push_back(&layer);
      previousLayer = &layer;
    }
    return previousLayerId;
  };
  // At 1M layers the table outgrows the caches: the slot a param's layer
  // will probe is fetched this many params before. A smaller table stays
  // cached, and the extra hash per param costs more than it saves.
  constexpr size_t kPrefetchAhead = 16, kPrefetchFromParams = size_t{1} << 18;
  const bool prefetchLayers = model.params.size() >= kPrefetchFromParams;
  std::vector<int> shardedParams;
  for (size_t i = 0; i < model.params.size(); ++i) {
    if (prefetchLayers && i + kPrefetchAhead < model.params.size()) {
      const Param &ahead = model.params[i + kPrefetchAhead];
      if (ahead.route == Route::owner)
        layerTable.prefetch(common::FirstSeenTable::hashOf(defaultLayerViewOf(ahead)));
    }
    Param &p = model.params[i];
    p.layerId = -1;
    if (p.route == Route::sharded)
      shardedParams.push_back(static_cast<int>(i));
    if (p.route != Route::owner)
      continue;
    p.layer = std::string(defaultLayerViewOf(p));
    p.layerId = layerIdOf(p.layer);
  }
  // Sharded-route params take ids after every owner param's (so the
  // partition's ids do not depend on them).
  std::vector<std::string> shardedLayers;
  shardedLayers.reserve(shardedParams.size()); // the table's keys view these strings
  for (int i : shardedParams) {
    Param &p = model.params[i];
    shardedLayers.push_back(std::string(defaultLayerViewOf(p)));
    p.layerId = layerIdOf(shardedLayers.back());
  }
  return layerIds.size();
}

// SOAP's and Shampoo's per-step flops (common/MatrixOptimizers.h), on the
// matrices their owner holds whole.
double preconditionerCost(const OptimizerDefaults &od, const Param &p) {
  const bool soap = p.matrixOptimizer == MatrixOptimizer::soap;
  return common::preconditionerFlops(p.matrixOptimizer, p.localBatch, p.localRows, p.localCols,
                                     soap ? od.soapMaxPrecondDim : od.shampooMaxPreconditionerDim,
                                     soap ? od.soapPreconditionFrequency
                                          : od.shampooPreconditionFrequency);
}

// Prices every owner-routed Muon param (Param::nsForm, Param::cost; the
// partition cost from the cost table when the cost model is measured) and
// collects the owner params. False after reporting every shape the cost
// table lacks.
bool priceOwnerParams(PlanModel &model, size_t numLayers, Diagnostics &diags, OwnerParams &out) {
  const Mesh &mesh = model.mesh;
  const int steps = model.options.optimizer.nsSteps;
  // Param::cost is always flops (NS; SOAP's and Shampoo's own for theirs:
  // the runtime counts them); what the partition balances is the cost
  // model's: flops, or measured seconds.
  const bool measured = model.options.costModel == CostModel::table;
  const int64_t D = mesh.dataCarryingSize();
  out.cost.assign(model.params.size(), 0.0);
  std::set<std::pair<int64_t, int64_t>> missing;
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    if (p.route != Route::owner)
      continue;
    if (p.role != Role::muon) {
      out.layer.push_back(p.layerId);
      out.params.push_back(static_cast<int>(i));
      continue;
    }
    // NS runs on the local matrices of a no_comm param (every model-parallel
    // rank of the owner slot, on its own shard), and on the gathered full
    // matrices of a comm param (one rank of the gather group): local batch
    // either way.
    const bool comm = p.group == ShardingGroupKind::comm;
    const int64_t nsRows = comm ? p.rows : p.localRows;
    const int64_t nsCols = comm ? p.cols : p.localCols;
    // Priced as the kernel will run it: the form the runtime's rule picks
    // for this shape, and that form's flops (kernels/NsForms.h).
    // Blocks (passes/NsBlocks.cpp) all run the form of the largest.
    const MatrixBlocks none;
    const MatrixBlocks &blocks = p.blocks ? *p.blocks : none;
    const common::BlockShape largest =
        common::largestBlock(blocks.dim, nsRows, nsCols, blocks.sizes);
    const kernels::NsForm form = kernels::ns::chooseForm(largest.rows, largest.cols);
    p.nsForm = planForm(form);
    const double nsFlops =
        common::blockedNsFlops(form, blocks.dim, nsRows, nsCols, blocks.sizes, steps);
    p.cost = static_cast<double>(p.localBatch) * nsFlops;
    if (common::preconditions(p.matrixOptimizer))
      p.cost = preconditionerCost(model.options.optimizer, p);
    out.cost[i] = p.cost;
    if (measured) {
      // A blocked matrix at the table's times of its block shapes.
      double sec = 0;
      bool found = true;
      auto addTime = [&](int64_t rows, int64_t cols) {
        std::optional<double> t = lookupCost(model.options.costTable, rows, cols);
        if (t) {
          sec += *t;
          return;
        }
        found = false;
        if (missing.insert({rows, cols}).second)
          diags.fileError(model.options.costTablePath,
                          "no measured time for shape " + std::to_string(rows) + "x" +
                              std::to_string(cols) + " (param '" + p.name + "')");
      };
      if (blocks.sizes.empty())
        addTime(nsRows, nsCols);
      for (int64_t size : blocks.sizes) {
        const common::BlockShape b = common::blockShape(blocks.dim, nsRows, nsCols, size);
        addTime(b.rows, b.cols);
      }
      if (!found)
        continue;
      // SOAP and Shampoo at the rate the table measured for NS on this shape.
      out.cost[i] = p.cost / nsFlops * sec;
    }
    out.layer.push_back(p.layerId);
    out.params.push_back(static_cast<int>(i));
    out.muonCosts.push_back(out.cost[i]);
    out.muonCopies.push_back(static_cast<double>(D / mesh.sizeOfDims(p.dataDims)));
    out.muonParams.push_back(static_cast<int>(i));
  }
  if (diags.hasErrors())
    return false;

  // Data classes and small params, read once, not per attempt.
  std::map<std::vector<int>, int> classIds;
  out.dataClass.reserve(out.params.size());
  out.small.reserve(out.params.size());
  for (int i : out.params) {
    const Param &p = model.params[i];
    auto [it, added] = classIds.try_emplace(p.dataDims, static_cast<int>(out.classDims.size()));
    if (added)
      out.classDims.push_back(p.dataDims);
    out.dataClass.push_back(it->second);
    out.small.push_back(p.numElements() < model.options.smallParamThreshold);
  }
  // Every model without data-carrying dims has one data class.
  out.numOpenIds = numLayers;
  if (out.classDims.size() <= 1) {
    out.openId = out.layer;
  } else {
    llvm::DenseMap<uint64_t, int, partition::PartitionKeyInfo> openIds;
    out.openId.reserve(out.params.size());
    for (size_t k = 0; k < out.params.size(); ++k) {
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(out.layer[k])) << 32) |
                           static_cast<uint32_t>(out.dataClass[k]);
      out.openId.push_back(
          openIds.try_emplace(key, static_cast<int>(openIds.size())).first->second);
    }
    out.numOpenIds = openIds.size();
  }
  return true;
}

// The balance the unit search aims at: within 1% of the lower bound.
constexpr double kTarget = 1.01;

// One way of cutting the owner params into units, and its partition.
struct Attempt {
  std::vector<Unit> units;
  std::vector<int> unitClass;
  std::vector<int64_t> dataIndex; // per unit
  std::vector<int> unitOfParam;   // per entry of OwnerParams::params
  PartitionResult result;
  double cap = 0;
};

// Units: a param is its own unit unless it is small; small params of one
// layer (and data class) share a unit (one owner, one packed broadcast), cut
// in model order into units of at most `cap` when cap > 0. Then partitions
// them over the fine slots.
Attempt buildUnits(const PlanModel &model, const OwnerParams &owners, double cap,
                   const PartitionOptions &popts) {
  Attempt a;
  a.cap = cap;
  const size_t n = owners.params.size();
  // Per (layer id, data class) id: the unit being filled, -1 if none.
  std::vector<int> openSmall(owners.numOpenIds, -1);
  std::vector<int> unitLayer;
  // At most one unit per param: no reallocation while filling.
  a.units.reserve(n);
  a.unitClass.reserve(n);
  a.unitOfParam.reserve(n);
  unitLayer.reserve(n);
  auto addUnit = [&](std::string name, const std::string &layer, int layerId, int cls) {
    Unit u;
    u.name = std::move(name);
    u.layer = layer;
    a.units.push_back(std::move(u));
    unitLayer.push_back(layerId);
    a.unitClass.push_back(cls);
    return static_cast<int>(a.units.size() - 1);
  };
  for (size_t k = 0; k < n; ++k) {
    const int param = owners.params[k];
    const Param &p = model.params[param];
    const double cost = owners.cost[param];
    int unit;
    if (owners.small[k]) {
      int &open = openSmall[owners.openId[k]];
      if (open >= 0 && cap > 0 && a.units[open].cost + cost > cap && !a.units[open].params.empty())
        open = -1;
      if (open < 0)
        open = addUnit((p.layer.empty() ? std::string("<root>") : p.layer) + ":small", p.layer,
                       owners.layer[k], owners.dataClass[k]);
      unit = open;
    } else {
      unit = addUnit(p.name, p.layer, owners.layer[k], owners.dataClass[k]);
    }
    a.unitOfParam.push_back(unit);
    a.units[unit].params.push_back(param);
    a.units[unit].cost += cost;
  }
  // Chunks after a layer's first are named <layer>:small.<n>. Keys view
  // the first chunk's name, which keeps its name.
  llvm::DenseMap<llvm::StringRef, int> chunks;
  for (Unit &u : a.units)
    if (u.name.size() > 6 && u.name.compare(u.name.size() - 6, 6, ":small") == 0) {
      int c = chunks[u.name]++;
      if (c > 0)
        u.name.append(".").append(std::to_string(c));
    }
  PartitionProblem problem;
  problem.slots = static_cast<int>(model.mesh.numFineSlots());
  problem.layer = std::move(unitLayer);
  // The names are lent to the problem and given back, not copied.
  problem.cost.reserve(a.units.size());
  problem.name.reserve(a.units.size());
  for (Unit &u : a.units) {
    problem.cost.push_back(u.cost);
    problem.name.push_back(std::move(u.name));
  }
  a.result = partitionFine(model.mesh, owners.classDims, problem, a.unitClass, popts, kTarget,
                           a.dataIndex);
  for (size_t u = 0; u < a.units.size(); ++u)
    a.units[u].name = std::move(problem.name[u]);
  return a;
}

// The search over unit cuts: first the strict same-layer rule; if it costs
// balance, the rule becomes a preference bounded by the target. Then, while
// the best is off the target, small params are split into units of at most
// cap, cap quartering each round (never below the cheapest small param,
// under which a cap splits no more), each cut tried under both rules.
Attempt searchUnits(const PlanModel &model, const OwnerParams &owners, double lowerBound) {
  const double target = kTarget * lowerBound;
  PartitionOptions strict;
  strict.lowerBound = lowerBound;
  PartitionOptions soft = strict;
  soft.layerTarget = target;
  PartitionOptions popts = strict;
  Attempt best = buildUnits(model, owners, 0, strict);
  if (best.result.maxLoad > target) {
    Attempt a = buildUnits(model, owners, 0, soft);
    if (a.result.maxLoad < best.result.maxLoad) {
      best = std::move(a);
      popts = soft;
    }
  }
  double smallest = 0;
  for (size_t k = 0; k < owners.params.size(); ++k)
    if (const double c = owners.cost[owners.params[k]]; owners.small[k] && c > 0)
      smallest = smallest == 0 ? c : std::min(smallest, c);
  double cap = lowerBound / 4;
  size_t prevUnits = best.units.size();
  for (int round = 0; round < 4 && best.result.maxLoad > target && smallest > 0;
       ++round, cap /= 4) {
    Attempt a = buildUnits(model, owners, std::max(cap, smallest), popts);
    const size_t unitsNow = a.units.size();
    if (unitsNow != prevUnits && a.result.maxLoad > target && popts.layerTarget == 0) {
      Attempt b = buildUnits(model, owners, std::max(cap, smallest), soft);
      if (b.result.maxLoad < a.result.maxLoad)
        a = std::move(b);
    }
    if (unitsNow != prevUnits && a.result.maxLoad < best.result.maxLoad)
      best = std::move(a);
    prevUnits = unitsNow;
    if (cap <= smallest)
      break;
  }
  return best;
}

// The chosen attempt into the model: units with their slots, each owner
// param's unit, and the partition's figures.
void recordPartition(PlanModel &model, const OwnerParams &owners, Attempt &best,
                     const LowerBound &lb) {
  model.units = std::move(best.units);
  for (size_t k = 0; k < owners.params.size(); ++k)
    model.params[owners.params[k]].unit = best.unitOfParam[k];
  const PartitionResult &result = best.result;
  for (size_t u = 0; u < model.units.size(); ++u) {
    model.units[u].slot = result.slotOf[u];
    model.units[u].dataIndex = best.dataIndex[u];
  }
  Stats &st = model.stats;
  st.slotLoad = result.load;
  st.totalCost = 0;
  for (size_t k = 0; k < owners.muonCosts.size(); ++k)
    st.totalCost += owners.muonCosts[k] * owners.muonCopies[k];
  st.lowerBound = lb.value;
  st.lowerBoundKind = lb.kind;
  st.simpleLowerBound = lb.simple;
  st.maxLoad = result.maxLoad;
  st.imbalance = st.lowerBound > 0 ? st.maxLoad / st.lowerBound : 1.0;
  st.optimal = st.maxLoad <= st.lowerBound * (1 + 1e-12);
  st.lptMaxLoad = result.lptMaxLoad;
  st.refinementMoves = result.refinementMoves;
  st.layerRuleViolations = result.layerViolations;
  st.smallUnitCap = best.cap;
}

// Renumbers `ids` densely (0, 1, ...) keeping their order; returns how many
// distinct ids there are.
size_t renumberDensely(std::vector<int> &ids) {
  std::vector<int> distinct = ids;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int &id : ids)
    id = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), id) -
                          distinct.begin());
  return distinct.size();
}

// The owner params of one pipeline stage, entries `entries` of `all` and
// Muon entries `muon`: the same search then runs on each stage's own slots
// (docs/partition.md, "Pipeline stages"). Its layer and open ids are
// renumbered within the stage, so that the search's tables grow with the
// stage's layers, not the model's. `cost` is left empty: the caller lends
// the model's to each stage in turn (copying it per stage would cost stages
// x params).
OwnerParams ownersOfStage(const OwnerParams &all, const std::vector<size_t> &entries,
                          const std::vector<size_t> &muon) {
  OwnerParams out;
  out.classDims = all.classDims;
  for (size_t k : entries) {
    out.params.push_back(all.params[k]);
    out.layer.push_back(all.layer[k]);
    out.dataClass.push_back(all.dataClass[k]);
    out.small.push_back(all.small[k]);
    out.openId.push_back(all.openId[k]);
  }
  for (size_t k : muon) {
    out.muonCosts.push_back(all.muonCosts[k]);
    out.muonCopies.push_back(all.muonCopies[k]);
    out.muonParams.push_back(all.muonParams[k]);
  }
  // Layer id -1 (none) stays -1.
  std::vector<int> layered;
  for (int id : out.layer)
    if (id >= 0)
      layered.push_back(id);
  renumberDensely(layered);
  for (size_t k = 0, j = 0; k < out.layer.size(); ++k)
    if (out.layer[k] >= 0)
      out.layer[k] = layered[j++];
  out.numOpenIds = renumberDensely(out.openId);
  return out;
}

// Every stage's partition, each over the stage's own G*R(*D) slots, into
// the model: units in stage order (their slots within their stage), the
// stages' loads one after another, one stats row per stage, and for the
// plan the worst stage (a pipeline's step is as slow as its slowest stage).
void partitionStages(PlanModel &model, OwnerParams &all) {
  const int stages = static_cast<int>(model.mesh.numStages());
  std::vector<std::vector<size_t>> entriesOf(static_cast<size_t>(stages)),
      muonOf(static_cast<size_t>(stages));
  for (size_t k = 0; k < all.params.size(); ++k)
    entriesOf[static_cast<size_t>(model.params[all.params[k]].pipelineStage)].push_back(k);
  for (size_t k = 0; k < all.muonParams.size(); ++k)
    muonOf[static_cast<size_t>(model.params[all.muonParams[k]].pipelineStage)].push_back(k);
  Stats &st = model.stats;
  st.slotLoad.clear();
  st.totalCost = st.lowerBound = st.simpleLowerBound = st.maxLoad = st.imbalance = 0;
  st.lptMaxLoad = st.smallUnitCap = 0;
  st.refinementMoves = st.layerRuleViolations = 0;
  st.optimal = true;
  st.pipelineStages.assign(static_cast<size_t>(stages), PipelineStageStats{});
  for (int s = 0; s < stages; ++s)
    st.pipelineStages[static_cast<size_t>(s)].stage = s;
  for (const Param &p : model.params) {
    PipelineStageStats &row = st.pipelineStages[static_cast<size_t>(p.pipelineStage)];
    ++row.params;
    row.paramElements += p.numElements();
  }
  model.units.clear();
  for (int s = 0; s < stages; ++s) {
    OwnerParams owners =
        ownersOfStage(all, entriesOf[static_cast<size_t>(s)], muonOf[static_cast<size_t>(s)]);
    const LowerBound lb = strongLowerBound(owners.muonCosts, owners.muonCopies,
                                           static_cast<int>(model.mesh.numFineSlots()));
    owners.cost.swap(all.cost); // lent for the search, given back
    Attempt best = searchUnits(model, owners, lb.value);
    owners.cost.swap(all.cost);
    const int firstUnit = static_cast<int>(model.units.size());
    for (size_t k = 0; k < owners.params.size(); ++k)
      model.params[owners.params[k]].unit = firstUnit + best.unitOfParam[k];
    const PartitionResult &result = best.result;
    for (size_t u = 0; u < best.units.size(); ++u) {
      Unit &unit = best.units[u];
      unit.slot = result.slotOf[u];
      unit.dataIndex = best.dataIndex[u];
      unit.pipelineStage = s;
      model.units.push_back(std::move(unit));
    }
    PipelineStageStats &row = st.pipelineStages[static_cast<size_t>(s)];
    for (size_t k = 0; k < owners.muonCosts.size(); ++k)
      row.totalCost += owners.muonCosts[k] * owners.muonCopies[k];
    row.lowerBound = lb.value;
    row.maxLoad = result.maxLoad;
    row.imbalance = lb.value > 0 ? result.maxLoad / lb.value : 1.0;
    st.slotLoad.insert(st.slotLoad.end(), result.load.begin(), result.load.end());
    st.totalCost += row.totalCost;
    if (s == 0 || lb.value > st.lowerBound) {
      st.lowerBound = lb.value;
      st.lowerBoundKind = lb.kind;
    }
    st.simpleLowerBound = std::max(st.simpleLowerBound, lb.simple);
    st.maxLoad = std::max(st.maxLoad, result.maxLoad);
    st.imbalance = std::max(st.imbalance, row.imbalance);
    st.optimal = st.optimal && result.maxLoad <= lb.value * (1 + 1e-12);
    st.lptMaxLoad = std::max(st.lptMaxLoad, result.lptMaxLoad);
    st.refinementMoves += result.refinementMoves;
    st.layerRuleViolations += result.layerViolations;
    st.smallUnitCap = std::max(st.smallUnitCap, best.cap);
  }
}

} // namespace

bool runPartition(PlanModel &model, Diagnostics &diags) {
  assignDefaultLayers(model);
  const size_t numLayers = numberLayers(model);
  OwnerParams owners;
  if (!priceOwnerParams(model, numLayers, diags, owners))
    return false;
  if (model.mesh.numStages() > 1) {
    partitionStages(model, owners);
    staggerRefreshes(model);
    return true;
  }
  // The bound is for the per-parameter problem (merging small params can only
  // show up as a worse max/LB, never hide), relaxed over the fine slots in
  // which each param is as many free items as the fine slots it runs on.
  const LowerBound lb = strongLowerBound(owners.muonCosts, owners.muonCopies,
                                         static_cast<int>(model.mesh.numFineSlots()));
  Attempt best = searchUnits(model, owners, lb.value);
  recordPartition(model, owners, best, lb);
  staggerRefreshes(model);
  return true;
}

} // namespace dmuon
