// The update rules of one executor, one instance each (a rule keeps its
// scratch and counters across params); each param gets the one its plan
// role names.
#ifndef DMUON_RUNTIME_OPTIM_OPTIMIZERS_H
#define DMUON_RUNTIME_OPTIM_OPTIMIZERS_H

#include "common/MatrixOptimizers.h"
#include "optim/AdamW.h"
#include "optim/Muon.h"
#include "optim/Preconditioned.h"

namespace dmuon::rt {

struct OptimizerSet {
  Muon muon;
  NorMuon normuon;
  Soap soap;
  Shampoo shampoo;
  AdamW adamw;

  ParamOptimizer &of(const ParamRt &p) {
    if (!p.muon)
      return adamw;
    switch (p.plan->matrix_optimizer()) {
    case plan::MatrixOptimizer::normuon:
      return normuon;
    case plan::MatrixOptimizer::soap:
      return soap;
    case plan::MatrixOptimizer::shampoo:
      return shampoo;
    case plan::MatrixOptimizer::muon:
      break;
    }
    return muon;
  }
  double nsFlops() const { return muon.nsFlops() + normuon.nsFlops(); }
  double preconditionerFlops() const { return soap.flops() + shampoo.flops(); }
  // Gives every param its rule and room for the rule's state arrays.
  Status assign(const Context &ctx, std::vector<ParamRt> &params) {
    for (ParamRt &p : params) {
      p.optimizer = &of(p);
      p.state.resize(p.optimizer->fields().size());
      if (auto *rule = dynamic_cast<PreconditionedRule *>(p.optimizer)) {
        if (!ctx.device.hasPreconditionerKernels())
          return unsupported("param '" + p.name + "' is a " +
                             plan::EnumNameMatrixOptimizer(p.plan->matrix_optimizer()) +
                             " matrix, but this device has no SOAP/Shampoo kernels (the CPU "
                             "and CUDA devices have them)");
        const int64_t cap = rule->maxDim(ctx);
        p.leftDim = common::preconditionsSide(p.localRows, cap) ? p.localRows : 0;
        p.rightDim = common::preconditionsSide(p.localCols, cap) ? p.localCols : 0;
        p.refreshPhase = p.plan->refresh_phase();
      }
    }
    for (ParamOptimizer *rule :
         std::initializer_list<ParamOptimizer *>{&muon, &normuon, &soap, &shampoo, &adamw})
      DMUON_RETURN_IF_ERROR(rule->reserve(ctx, params));
    return Status::ok();
  }
};

} // namespace dmuon::rt

#endif
