#include "optim/AdamW.h"

namespace dmuon::rt {

namespace {

constexpr StateField kFields[] = {
    {ckpt::Kind::AdamM, &MemoryAccounts::adamMoments},
    {ckpt::Kind::AdamV, &MemoryAccounts::adamMoments},
};

} // namespace

std::span<const StateField> AdamW::fields() const { return kFields; }

Status AdamW::step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
                   int64_t adamwStep) {
  return ctx.device.adamwStep(p.master.floats(), p.state[0].floats(), p.state[1].floats(), grad, n,
                              adamwStep, withGroupScale(ctx.config.adamw, p));
}

} // namespace dmuon::rt
