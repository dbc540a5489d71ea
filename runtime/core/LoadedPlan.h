// A verified plan held by the runtime, with the lookups the executor and the
// C API need.
#ifndef DMUON_RUNTIME_CORE_LOADEDPLAN_H
#define DMUON_RUNTIME_CORE_LOADEDPLAN_H

#include "base/Status.h"
#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dmuon::rt {

class LoadedPlan {
public:
  // Verifies `bytes` (complete plans only) and takes them.
  static Status create(std::vector<uint8_t> bytes, std::unique_ptr<LoadedPlan> &out);

  const dmuon::plan::Plan &root() const { return *root_; }
  uint64_t fingerprint() const { return root_->fingerprint(); }
  int worldSize() const { return root_->mesh()->world_size(); }
  int numParams() const { return static_cast<int>(root_->params()->size()); }
  const dmuon::plan::Param &param(int i) const { return *root_->params()->Get(i); }
  // -1 if no param has this name.
  int findParam(const std::string &name) const;

private:
  std::vector<uint8_t> bytes_;
  const dmuon::plan::Plan *root_ = nullptr;
  std::unordered_map<std::string, int> byName_;
};

} // namespace dmuon::rt

#endif
