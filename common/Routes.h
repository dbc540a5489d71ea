// The routes of params (plan.fbs `Route`): their names as manifests and
// flags spell them, the route a plan of any minor version means, and the
// flat shard rule of the sharded route. Shared by dmuonc, the verifier, the
// runtime and the printers.
#ifndef DMUON_COMMON_ROUTES_H
#define DMUON_COMMON_ROUTES_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace dmuon::common {

inline std::optional<plan::Route> parseRoute(std::string_view name) {
  for (plan::Route r : {plan::Route::owner, plan::Route::sharded, plan::Route::replicated,
                        plan::Route::host})
    if (name == plan::EnumNameRoute(r))
      return r;
  return std::nullopt;
}

inline constexpr const char *kRouteNames = "owner, sharded, replicated or host";

// A Muon param always travels the owner route; plans before 1.3 carry no
// route, and there every AdamW param is replicated (the field's default).
inline plan::Route effectiveRoute(const plan::Param &p) {
  return p.role() == plan::Role::muon ? plan::Route::owner : p.route();
}

// A sharded param's local elements are cut into `shards` equal flat pieces
// (FSDP2's rule: the last pieces are padded, none is refused for size).
inline int64_t shardElements(int64_t localElements, int64_t shards) {
  return shards > 0 ? (localElements + shards - 1) / shards : localElements;
}

} // namespace dmuon::common

#endif
