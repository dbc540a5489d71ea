// Part of partition: the refresh phases of SOAP's and Shampoo's matrices.
//
// Each refreshes its basis once per precondition period, a step that costs
// far more than the others (eigendecompositions, QRs); refreshing every
// matrix on the same step makes that step the slowest by that much. The
// phases spread the refreshes over the period's steps: per rule, the
// matrices by descending refresh cost each take the phase whose refreshes
// cost least so far (LPT over `frequency` bins). The assignment is the
// model's, not the partition's: every mesh runs the same math at the same
// steps, so runs stay bit-identical across meshes and checkpoints resume on
// any mesh; an owner's share of a spread model is spread too.
#include "Passes.h"

#include "common/MatrixOptimizers.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace dmuon {

void staggerRefreshes(PlanModel &model) {
  const OptimizerDefaults &od = model.options.optimizer;
  for (MatrixOptimizer rule : {MatrixOptimizer::soap, MatrixOptimizer::shampoo}) {
    const bool soap = rule == MatrixOptimizer::soap;
    const int64_t cap = soap ? od.soapMaxPrecondDim : od.shampooMaxPreconditionerDim;
    const int frequency = soap ? od.soapPreconditionFrequency : od.shampooPreconditionFrequency;
    std::vector<int> matrices;
    std::vector<double> cost(model.params.size(), 0.0);
    for (size_t i = 0; i < model.params.size(); ++i) {
      Param &p = model.params[i];
      if (p.role != Role::muon || p.matrixOptimizer != rule)
        continue;
      p.refreshPhase = 0;
      cost[i] = common::refreshFlops(rule, p.localBatch, p.localRows, p.localCols, cap);
      if (od.staggerRefreshes && cost[i] > 0)
        matrices.push_back(static_cast<int>(i));
    }
    std::stable_sort(matrices.begin(), matrices.end(),
                     [&](int a, int b) { return cost[a] > cost[b]; });
    std::vector<double> load(static_cast<size_t>(frequency), 0.0);
    for (int i : matrices) {
      const auto phase = std::min_element(load.begin(), load.end()) - load.begin();
      load[static_cast<size_t>(phase)] += cost[static_cast<size_t>(i)];
      model.params[static_cast<size_t>(i)].refreshPhase = static_cast<int>(phase);
    }
  }
}

} // namespace dmuon
