// partition (spec 000 §3.1): units -> global LPT over all G*R owner slots ->
// owner slot per unit. Small params of one layer merge into one unit; units
// of one layer prefer distinct slots; a bounded refinement follows LPT.
#include "Passes.h"
#include "passes/Partitioner.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace dmuon {

double nsFlops(int64_t rows, int64_t cols, int steps) {
  const double s = static_cast<double>(std::min(rows, cols));
  const double l = static_cast<double>(std::max(rows, cols));
  return steps * (4.0 * s * s * l + 2.0 * s * s * s);
}

namespace {

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

std::string defaultLayerOf(const std::string &paramName) {
  size_t lastDot = paramName.rfind('.');
  if (lastDot == std::string::npos)
    return "";
  std::string_view module(paramName.data(), lastDot);
  // Walk ancestors from the deepest: the first "<...>.(layers|blocks|h).N" wins.
  std::string_view path = module;
  while (true) {
    size_t dot = path.rfind('.');
    if (dot != std::string_view::npos) {
      std::string_view index = path.substr(dot + 1);
      std::string_view rest = path.substr(0, dot);
      size_t prev = rest.rfind('.');
      std::string_view container =
          prev == std::string_view::npos ? rest : rest.substr(prev + 1);
      if (isDigits(index) &&
          (container == "layers" || container == "blocks" || container == "h"))
        return std::string(path);
      path = rest;
    } else {
      break;
    }
  }
  return std::string(module);
}

bool runPartition(PlanModel &model, Diagnostics &diags) {
  const Mesh &mesh = model.mesh;
  const int steps = model.options.optimizer.nsSteps;

  // dmuon owns a Muon param's data-parallel placement: it must be Replicate
  // on the ownership dims.
  for (Param &p : model.params) {
    if (p.role != Role::Muon)
      continue;
    for (size_t d = 0; d < p.placements.size(); ++d)
      if (mesh.isOwnershipDim(static_cast<int>(d)) && !p.placements[d].isReplicate())
        diags.error(p.loc, "Muon param '" + p.name + "' is " + p.placements[d].str() +
                               " on data-parallel mesh dim '" + mesh.dims[d].name +
                               "'; dmuon owns the data-parallel placement of Muon "
                               "params, declare it Replicate");
  }
  if (diags.hasErrors())
    return false;

  // Units: a param is its own unit unless it is small; small params of one
  // layer share a unit (and an owner, and one packed broadcast).
  std::map<std::string, int> layerIds;
  std::unordered_map<std::string, int> smallUnitOfLayer;
  std::vector<int> unitLayer;
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    if (p.role != Role::Muon)
      continue;
    p.layer = defaultLayerOf(p.name);
    p.cost = static_cast<double>(p.batch) * nsFlops(p.rows, p.cols, steps);
    auto [lit, _] = layerIds.try_emplace(p.layer, static_cast<int>(layerIds.size()));
    int unit;
    if (p.numElements() < model.options.smallParamThreshold) {
      auto [it, inserted] =
          smallUnitOfLayer.try_emplace(p.layer, static_cast<int>(model.units.size()));
      if (inserted) {
        Unit u;
        u.name = (p.layer.empty() ? std::string("<root>") : p.layer) + ":small";
        u.layer = p.layer;
        model.units.push_back(u);
        unitLayer.push_back(lit->second);
      }
      unit = it->second;
    } else {
      Unit u;
      u.name = p.name;
      u.layer = p.layer;
      unit = static_cast<int>(model.units.size());
      model.units.push_back(u);
      unitLayer.push_back(lit->second);
    }
    p.unit = unit;
    model.units[unit].params.push_back(static_cast<int>(i));
    model.units[unit].cost += p.cost;
  }

  PartitionProblem problem;
  problem.slots = static_cast<int>(mesh.numSlots());
  problem.layer = unitLayer;
  for (const Unit &u : model.units) {
    problem.cost.push_back(u.cost);
    problem.name.push_back(u.name);
  }
  PartitionResult result = partitionUnits(problem);
  for (size_t u = 0; u < model.units.size(); ++u)
    model.units[u].slot = result.slotOf[u];

  Stats &st = model.stats;
  st.slotLoad = result.load;
  st.totalCost = 0;
  for (double c : problem.cost)
    st.totalCost += c;
  st.lowerBound = simpleLowerBound(problem.cost, problem.slots);
  st.maxLoad = result.maxLoad;
  st.imbalance = st.lowerBound > 0 ? st.maxLoad / st.lowerBound : 1.0;
  st.lptMaxLoad = result.lptMaxLoad;
  st.refinementMoves = result.refinementMoves;
  st.layerRuleViolations = result.layerViolations;
  return true;
}

} // namespace dmuon
