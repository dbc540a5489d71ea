// pipeline-stages (docs/dmuonc.md#pipeline-stages): which pipeline stage of
// the mesh's stage dim (pp) holds each param. A stage is a contiguous run of
// layers (the default layer keys, passes/Blocks.cpp) in model order, so the
// embedding falls on the first stage and the head on the last. By default
// the runs are balanced by param elements (the host's forward and backward
// compute grows with them); `stage = k` in the manifest and --pipeline-split
// name the stages instead. Runs before the partition, which then balances
// each stage over its own ranks.
#include "Passes.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace dmuon {

namespace {

// A layer key and what the stage choice reads of it.
struct Layer {
  std::string_view name;
  int firstParam = -1;
  int64_t elements = 0;
  int stage = -1;      // assigned so far (-1: none)
  int stageParam = -1; // the param whose manifest `stage` gave it, if any
  int splitItem = -1;  // the --pipeline-split item that lists it, if any
};

// The layers in first-seen (model) order and each param's layer.
std::vector<Layer> collectLayers(const PlanModel &model, std::vector<int> &layerOf) {
  std::vector<Layer> layers;
  std::unordered_map<std::string_view, int> index;
  layerOf.assign(model.params.size(), -1);
  for (size_t i = 0; i < model.params.size(); ++i) {
    const Param &p = model.params[i];
    const std::string_view key = defaultLayerViewOf(p);
    auto [it, added] = index.try_emplace(key, static_cast<int>(layers.size()));
    if (added)
      layers.push_back(Layer{key, static_cast<int>(i)});
    layers[it->second].elements += p.numElements();
    layerOf[i] = it->second;
  }
  return layers;
}

std::string layerName(const Layer &l) { return l.name.empty() ? "<root>" : std::string(l.name); }

// Contiguous runs of `weights` into exactly `parts` non-empty runs whose
// largest sum is the least possible (bisection on that sum, then a greedy
// cut that leaves every later run at least one layer). Returns each
// layer's run.
std::vector<int> balancedRuns(const std::vector<int64_t> &weights, int parts) {
  int64_t lo = 0, hi = 0;
  for (int64_t w : weights) {
    lo = std::max(lo, w);
    hi += w;
  }
  auto runsUnder = [&](int64_t cap) {
    int runs = 1;
    int64_t sum = 0;
    for (int64_t w : weights) {
      if (sum + w > cap) {
        ++runs;
        sum = 0;
      }
      sum += w;
    }
    return runs;
  };
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (runsUnder(mid) <= parts)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::vector<int> runOf(weights.size(), 0);
  const size_t n = weights.size();
  int run = 0;
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool full = sum + weights[i] > lo;
    const bool leaveOneEach = n - i <= static_cast<size_t>(parts - 1 - run);
    if (i > 0 && run + 1 < parts && (full || leaveOneEach)) {
      ++run;
      sum = 0;
    }
    sum += weights[i];
    runOf[i] = run;
  }
  return runOf;
}

class StageAssigner {
public:
  StageAssigner(PlanModel &model, Diagnostics &diags)
      : model_(model), diags_(diags), stages_(static_cast<int>(model.mesh.numStages())) {}

  bool run();

private:
  bool checkStageDimPlacements();
  bool applyManifestStages();
  bool applySplitFlag();
  bool checkContiguousAndNonEmpty();
  // `--pipeline-split` item `item`'s layers: "layers.0-15" (a range of
  // numbered layers: prefix, first, '-', last) or one layer key.
  bool matchItem(std::string_view item, size_t col, int itemIndex);
  // Assigns layer k to split item `itemIndex`; false (reported) if another
  // item holds it.
  bool takeLayer(size_t k, size_t col, int itemIndex);
  void indexLayers();
  llvm::SMLoc splitLoc(size_t col) const {
    return diags_.locFor(splitBuffer_, 1, static_cast<unsigned>(col + 1));
  }

  PlanModel &model_;
  Diagnostics &diags_;
  const int stages_;
  std::vector<Layer> layers_;
  std::vector<int> layerOf_;
  unsigned splitBuffer_ = 0;
  // The split items' lookups, so that each item costs a hash lookup (and a
  // binary search) instead of a pass over every layer: the layers by name,
  // and the numbered ones (a name ending in 1-9 digits) by the prefix before
  // the digits, as (number, layer) in ascending order.
  std::unordered_map<std::string_view, size_t> byName_;
  std::unordered_map<std::string_view, std::vector<std::pair<int64_t, size_t>>> byPrefix_;
};

bool StageAssigner::checkStageDimPlacements() {
  const int dim = model_.mesh.stageDim;
  bool ok = true;
  for (const Param &p : model_.params)
    if (!p.placements[dim].isReplicate()) {
      const std::string msg = "param '" + p.name + "' is " + p.placements[dim].str() +
                              " on the pipeline (stage) dim '" + model_.mesh.dims[dim].name +
                              "'; a param lives on one stage whole: give Replicate there";
      p.loc.isValid() ? diags_.error(p.loc, msg) : diags_.error(msg);
      ok = false;
    }
  return ok;
}

bool StageAssigner::applyManifestStages() {
  bool ok = true;
  for (size_t i = 0; i < model_.params.size(); ++i) {
    const Param &p = model_.params[i];
    if (p.manifestStage < 0)
      continue;
    if (p.manifestStage >= stages_) {
      diags_.error(p.stageLoc, "stage " + std::to_string(p.manifestStage) + " of param '" + p.name +
                                   "' is out of range: the mesh has " + std::to_string(stages_) +
                                   " pipeline stage" + (stages_ == 1 ? " (no pp dim)" : "s"));
      ok = false;
      continue;
    }
    Layer &l = layers_[layerOf_[i]];
    if (l.stage < 0) {
      l.stage = p.manifestStage;
      l.stageParam = static_cast<int>(i);
    } else if (l.stage != p.manifestStage) {
      const Param &first = model_.params[l.stageParam];
      diags_.error(p.stageLoc, "param '" + p.name + "' is on stage " +
                                   std::to_string(p.manifestStage) + " but param '" + first.name +
                                   "' (" + diags_.describe(first.stageLoc) +
                                   ") of the same layer '" + layerName(l) + "' is on stage " +
                                   std::to_string(l.stage) +
                                   ": a layer (hook group) cannot span a pipeline stage boundary");
      ok = false;
    }
  }
  return ok;
}

bool StageAssigner::matchItem(std::string_view item, size_t col, int itemIndex) {
  // A range: the digits before '-' and after it end the item.
  const size_t dash = item.rfind('-');
  auto allDigits = [](std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  std::string_view prefix = item;
  int64_t first = -1, last = -1;
  if (dash != std::string_view::npos && allDigits(item.substr(dash + 1))) {
    size_t b = dash;
    while (b > 0 && item[b - 1] >= '0' && item[b - 1] <= '9')
      --b;
    if (b == dash || item.substr(b, dash - b).size() > 9 || item.size() - dash - 1 > 9) {
      diags_.error(splitLoc(col), "--pipeline-split: expected a layer range such as "
                                  "'layers.0-15' or a layer name, not '" +
                                      std::string(item) + "'");
      return false;
    }
    prefix = item.substr(0, b);
    first = std::stoll(std::string(item.substr(b, dash - b)));
    last = std::stoll(std::string(item.substr(dash + 1)));
    if (first > last) {
      diags_.error(splitLoc(col + b), "--pipeline-split: range " + std::to_string(first) + "-" +
                                          std::to_string(last) + " is empty");
      return false;
    }
  }
  bool ok = true, matched = false;
  if (first < 0) {
    if (auto it = byName_.find(item); it != byName_.end()) {
      matched = true;
      ok = takeLayer(it->second, col, itemIndex);
    }
  } else if (auto it = byPrefix_.find(prefix); it != byPrefix_.end()) {
    const std::vector<std::pair<int64_t, size_t>> &numbered = it->second;
    auto at = std::lower_bound(numbered.begin(), numbered.end(), std::make_pair(first, size_t{0}));
    // An item stops at its first layer another item holds: one error each,
    // and no item walks the layers twice.
    for (; at != numbered.end() && at->first <= last && ok; ++at) {
      matched = true;
      ok = takeLayer(at->second, col, itemIndex);
    }
  }
  if (!matched) {
    diags_.error(splitLoc(col), "--pipeline-split: '" + std::string(item) +
                                    "' matches no layer of the model, which leaves stage " +
                                    std::to_string(itemIndex) + " empty");
    ok = false;
  }
  return ok;
}

bool StageAssigner::takeLayer(size_t k, size_t col, int itemIndex) {
  Layer &l = layers_[k];
  if (l.splitItem >= 0 && l.splitItem != itemIndex) {
    diags_.error(splitLoc(col), "--pipeline-split: layer '" + layerName(l) + "' is in stage " +
                                    std::to_string(l.splitItem) + " and stage " +
                                    std::to_string(itemIndex) + "; a param belongs to one stage");
    return false;
  }
  l.splitItem = itemIndex;
  return true;
}

void StageAssigner::indexLayers() {
  for (size_t k = 0; k < layers_.size(); ++k) {
    const std::string_view name = layers_[k].name;
    byName_.emplace(name, k);
    size_t b = name.size();
    while (b > 0 && name[b - 1] >= '0' && name[b - 1] <= '9')
      --b;
    if (b == name.size() || name.size() - b > 9)
      continue;
    byPrefix_[name.substr(0, b)].push_back({std::stoll(std::string(name.substr(b))), k});
  }
  for (auto &[prefix, numbered] : byPrefix_)
    std::sort(numbered.begin(), numbered.end());
}

bool StageAssigner::applySplitFlag() {
  const std::string &text = model_.options.pipelineSplit;
  splitBuffer_ = diags_.addBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, "<pipeline-split>"));
  std::vector<std::pair<std::string_view, size_t>> items;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t end = std::min(text.find(',', pos), text.size());
    items.push_back({std::string_view(text).substr(pos, end - pos), pos});
    pos = end + 1;
  }
  bool ok = true;
  for (size_t k = 0; k < items.size(); ++k)
    if (items[k].first.empty()) {
      diags_.error(splitLoc(items[k].second),
                   "--pipeline-split: stage " + std::to_string(k) + " names no layers");
      ok = false;
    }
  if (!ok)
    return false;
  if (static_cast<int>(items.size()) != stages_) {
    diags_.error(splitLoc(0), "--pipeline-split names " + std::to_string(items.size()) + " stage" +
                                  (items.size() == 1 ? "" : "s") + " but the pipeline dim '" +
                                  model_.mesh.dims[model_.mesh.stageDim].name + "' has " +
                                  std::to_string(stages_));
    return false;
  }
  indexLayers();
  for (size_t k = 0; k < items.size(); ++k)
    ok &= matchItem(items[k].first, items[k].second, static_cast<int>(k));
  if (!ok)
    return false;
  for (Layer &l : layers_) {
    if (l.splitItem < 0)
      continue;
    if (l.stage >= 0 && l.stage != l.splitItem) {
      const Param &p = model_.params[l.stageParam];
      diags_.error(p.stageLoc, "param '" + p.name + "' is on stage " + std::to_string(l.stage) +
                                   " here but --pipeline-split puts its layer '" + layerName(l) +
                                   "' on stage " + std::to_string(l.splitItem) +
                                   "; a param belongs to one stage");
      ok = false;
      continue;
    }
    l.stage = l.splitItem;
  }
  return ok;
}

bool StageAssigner::checkContiguousAndNonEmpty() {
  // Layers nobody named follow the layer before them (the first stage
  // before any named one): the embedding joins the first stage, the final
  // norm and the head the last named stage.
  int previous = 0;
  for (Layer &l : layers_) {
    if (l.stage < 0)
      l.stage = previous;
    previous = l.stage;
  }
  std::vector<int> layersOf(static_cast<size_t>(stages_), 0);
  for (size_t k = 0; k < layers_.size(); ++k) {
    ++layersOf[static_cast<size_t>(layers_[k].stage)];
    if (k > 0 && layers_[k].stage < layers_[k - 1].stage) {
      const Param &p = model_.params[layers_[k].firstParam];
      const std::string msg = "layer '" + layerName(layers_[k]) + "' is on stage " +
                              std::to_string(layers_[k].stage) + " but follows layer '" +
                              layerName(layers_[k - 1]) + "' on stage " +
                              std::to_string(layers_[k - 1].stage) +
                              ": a pipeline stage is a contiguous run of layers in model order";
      p.loc.isValid() ? diags_.error(p.loc, msg) : diags_.error(msg);
      return false;
    }
  }
  bool ok = true;
  for (int s = 0; s < stages_; ++s)
    if (layersOf[static_cast<size_t>(s)] == 0) {
      diags_.error("pipeline stage " + std::to_string(s) + " of " + std::to_string(stages_) +
                   " holds no layer; every stage of mesh dim '" +
                   model_.mesh.dims[model_.mesh.stageDim].name + "' needs params");
      ok = false;
    }
  return ok;
}

bool StageAssigner::run() {
  const bool manifest = std::any_of(model_.params.begin(), model_.params.end(),
                                    [](const Param &p) { return p.manifestStage >= 0; });
  const std::string &split = model_.options.pipelineSplit;
  if (stages_ == 1) {
    // Without a stage dim every param is on stage 0; a manifest may say so.
    bool ok = true;
    const std::string hint =
        model_.mesh.stageDim < 0 ? " (no pipeline dim: add one, e.g. --mesh pp=2,dp_shard=4)" : "";
    for (const Param &p : model_.params)
      if (p.manifestStage > 0) {
        diags_.error(p.stageLoc, "stage " + std::to_string(p.manifestStage) + " of param '" +
                                     p.name + "' is out of range: the mesh has 1 pipeline stage" +
                                     hint);
        ok = false;
      }
    if (!split.empty()) {
      diags_.error("--pipeline-split needs a pipeline (stage) dim in --mesh, e.g. pp=2");
      ok = false;
    }
    return ok;
  }
  if (!checkStageDimPlacements())
    return false;
  assignDefaultLayers(model_);
  layers_ = collectLayers(model_, layerOf_);
  if (static_cast<int>(layers_.size()) < stages_) {
    diags_.error("mesh dim '" + model_.mesh.dims[model_.mesh.stageDim].name + "=" +
                 std::to_string(stages_) +
                 "' asks for more pipeline stages than the model has "
                 "layers (" +
                 std::to_string(layers_.size()) +
                 ", the embedding and the head among them); every stage needs at least one");
    return false;
  }
  if (manifest && !applyManifestStages())
    return false;
  if (!split.empty() && !applySplitFlag())
    return false;
  if (!manifest && split.empty()) {
    std::vector<int64_t> weights;
    weights.reserve(layers_.size());
    for (const Layer &l : layers_)
      weights.push_back(l.elements);
    const std::vector<int> runOf = balancedRuns(weights, stages_);
    for (size_t k = 0; k < layers_.size(); ++k)
      layers_[k].stage = runOf[k];
  }
  if (!checkContiguousAndNonEmpty())
    return false;
  for (size_t i = 0; i < model_.params.size(); ++i)
    model_.params[i].pipelineStage = layers_[layerOf_[i]].stage;
  return true;
}

} // namespace

bool runPipelineStages(PlanModel &model, Diagnostics &diags) {
  return StageAssigner(model, diags).run();
}

} // namespace dmuon
