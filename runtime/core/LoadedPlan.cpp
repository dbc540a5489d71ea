#include "core/LoadedPlan.h"

#include "plan/PlanFile.h"

namespace dmuon::rt {

Status LoadedPlan::create(std::vector<uint8_t> bytes, std::unique_ptr<LoadedPlan> &out) {
  std::string err = planfile::verifyPlan(bytes.data(), bytes.size(), /*requireComplete=*/true);
  if (!err.empty())
    return {DMUON_ERROR_INVALID_PLAN, err};
  // A valid plan this runtime cannot run yet: the executor has no stage
  // schedule (activations between stages), so a pipeline plan is refused
  // here rather than run as if every rank held every stage.
  if (const plan::Mesh *mesh = dmuon::plan::GetPlan(bytes.data())->mesh();
      mesh && mesh->num_stages() > 1) {
    const int d = mesh->stage_dim();
    const std::string dim =
        d >= 0 && mesh->dims() && static_cast<uint32_t>(d) < mesh->dims()->size()
            ? mesh->dims()->Get(static_cast<uint32_t>(d))->name()->str()
            : std::string("pp");
    return unsupported("pipeline stages (" + dim + "=" + std::to_string(mesh->num_stages()) +
                       ") are not supported by this runtime yet");
  }
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
