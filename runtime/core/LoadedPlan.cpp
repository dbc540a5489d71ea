#include "core/LoadedPlan.h"

#include "plan/PlanFile.h"

namespace dmuon::rt {

Status LoadedPlan::create(std::vector<uint8_t> bytes, std::unique_ptr<LoadedPlan> &out) {
  std::string err = planfile::verifyPlan(bytes.data(), bytes.size(), /*requireComplete=*/true);
  if (!err.empty())
    return {DMUON_ERROR_INVALID_PLAN, err};
  auto plan = std::make_unique<LoadedPlan>();
  plan->bytes_ = std::move(bytes);
  plan->root_ = dmuon::plan::GetPlan(plan->bytes_.data());
  const auto *params = plan->root_->params();
  for (flatbuffers::uoffset_t i = 0; params && i < params->size(); ++i)
    plan->byName_.emplace(params->Get(i)->name()->str(), static_cast<int>(i));
  out = std::move(plan);
  return Status::ok();
}

int LoadedPlan::findParam(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? -1 : it->second;
}

} // namespace dmuon::rt
