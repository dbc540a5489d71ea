// The verifier's checks of the QK-Clip pairs (format 1.2; PlanChecker.h):
// what the runtime's clip (optim/QkClip) relies on without checking again.
#include "plan/verify/PlanChecker.h"

#include "common/HyperRanges.h"

namespace dmuon::planfile::detail {

std::string Checker::checkQkClip() {
  if (const plan::Options *o = p_.options())
    if (!common::kQkClipTauRange.contains(o->qk_clip_tau()))
      return "options.qk_clip_tau is " + std::to_string(o->qk_clip_tau()) +
             " (must be finite and > 0)";
  const auto *pairs = p_.qk_clip();
  std::vector<int> pairOf(static_cast<size_t>(numParams_), -1);
  for (uint32_t i = 0; i < size(pairs); ++i) {
    const plan::QkClipPair &pair = *pairs->Get(i);
    const std::string who = "qk_clip pair #" + std::to_string(i);
    if (auto e = range(who, ": query", pair.query(), numParams_, "params", false); !e.empty())
      return e;
    if (auto e = range(who, ": key", pair.key(), numParams_, "params", false); !e.empty())
      return e;
    if (pair.query() == pair.key())
      return who + ": query and key are both param #" + std::to_string(pair.key());
    if (pair.heads() < 1 || pair.key_heads() < 1 || pair.head_dim() < 1 ||
        pair.heads() % pair.key_heads() != 0)
      return who + ": heads " + std::to_string(pair.heads()) + ", key_heads " +
             std::to_string(pair.key_heads()) + ", head_dim " + std::to_string(pair.head_dim()) +
             " (each must be >= 1, and key_heads must divide heads)";
    for (const auto &[index, heads] :
         {std::pair{pair.query(), pair.heads()}, std::pair{pair.key(), pair.key_heads()}}) {
      const plan::Param &q = *p_.params()->Get(static_cast<uint32_t>(index));
      const std::string what = who + ": param '" + str(q.name()) + "'";
      if (pairOf[index] >= 0)
        return what + " is also in qk_clip pair #" + std::to_string(pairOf[index]);
      pairOf[index] = static_cast<int>(i);
      if (q.role() != plan::Role::muon || q.conv() || size(q.shape()) != 2)
        return what + " is not a 2-D Muon matrix";
      const int64_t rows = int64_t(heads) * pair.head_dim();
      if (q.shape()->Get(0) != rows)
        return what + " has " + std::to_string(q.shape()->Get(0)) + " rows, not " +
               std::to_string(heads) + " heads x " + std::to_string(pair.head_dim());
      if (size(q.local_shape()) == 2 && q.local_shape()->Get(0) != rows)
        return what + " has its rows split over a model-parallel mesh dim";
    }
  }
  return {};
}

} // namespace dmuon::planfile::detail
