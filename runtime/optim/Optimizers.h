// The update rules of one executor, one instance each (a rule keeps its
// scratch and counters across params); each param gets the one its plan
// role names.
#ifndef DMUON_RUNTIME_OPTIM_OPTIMIZERS_H
#define DMUON_RUNTIME_OPTIM_OPTIMIZERS_H

#include "optim/AdamW.h"
#include "optim/Muon.h"

namespace dmuon::rt {

struct OptimizerSet {
  Muon muon;
  NorMuon normuon;
  AdamW adamw;

  ParamOptimizer &of(const ParamRt &p) {
    if (!p.muon)
      return adamw;
    if (p.plan->matrix_optimizer() == plan::MatrixOptimizer::normuon)
      return normuon;
    return muon;
  }
  double nsFlops() const { return muon.nsFlops() + normuon.nsFlops(); }
  // Gives every param its rule and room for the rule's state arrays.
  Status assign(const Context &ctx, std::vector<ParamRt> &params) {
    for (ParamRt &p : params) {
      p.optimizer = &of(p);
      p.state.resize(p.optimizer->fields().size());
    }
    DMUON_RETURN_IF_ERROR(muon.reserve(ctx, params));
    DMUON_RETURN_IF_ERROR(normuon.reserve(ctx, params));
    return adamw.reserve(ctx, params);
  }
};

} // namespace dmuon::rt

#endif
