// A comm group's replicate groups (docs/dmuonc.md#grouping): the ranks that
// differ from each other only on the group's replicate mesh dims. They are a
// formula of the mesh and those dims, so from plan 1.5 on the plan records
// only the dims (CommGroup.replicate_mesh_dims) and readers list the groups
// with this helper, in the order older plans stored them: each group's ranks
// ascending, groups by their first (smallest) rank.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_REPLICATEGROUPS_H
#define DMUON_COMMON_REPLICATEGROUPS_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dmuon::common {

struct ReplicateGroupShape {
  int64_t count = 1; // groups
  int64_t size = 1;  // ranks per group
};

// `sizes`: the mesh dim sizes (a size below 1 counts as 1); `replicateDims`:
// indices into them (out-of-range and repeated ones are ignored, as the
// verifier refuses them before any printer runs).
inline std::vector<bool> replicateDimMask(const std::vector<int64_t> &sizes,
                                          const std::vector<int> &replicateDims) {
  std::vector<bool> mask(sizes.size(), false);
  for (int d : replicateDims)
    if (d >= 0 && static_cast<size_t>(d) < sizes.size())
      mask[static_cast<size_t>(d)] = true;
  return mask;
}

inline ReplicateGroupShape replicateGroupShape(const std::vector<int64_t> &sizes,
                                               const std::vector<int> &replicateDims) {
  const std::vector<bool> mask = replicateDimMask(sizes, replicateDims);
  ReplicateGroupShape shape;
  for (size_t i = 0; i < sizes.size(); ++i)
    (mask[i] ? shape.size : shape.count) *= sizes[i] > 0 ? sizes[i] : 1;
  return shape;
}

// Calls visit(ranks) for the first `maxGroups` groups in order (all of them
// when maxGroups < 0), each cut after `maxMembers` ranks (< 0: whole);
// O(ranks listed + dims per group): every group is built directly from its
// coordinates, never by searching the mesh.
template <typename Visit>
void forEachReplicateGroup(const std::vector<int64_t> &sizes,
                           const std::vector<int> &replicateDims, int64_t maxGroups,
                           Visit visit, int64_t maxMembers = -1) {
  const std::vector<bool> mask = replicateDimMask(sizes, replicateDims);
  const size_t n = sizes.size();
  std::vector<int64_t> stride(n, 1), size(n);
  for (size_t i = n; i-- > 0;) {
    size[i] = sizes[i] > 0 ? sizes[i] : 1;
    if (i + 1 < n)
      stride[i] = stride[i + 1] * size[i + 1];
  }
  const ReplicateGroupShape shape = replicateGroupShape(sizes, replicateDims);
  // Odometers over the other dims (the group's base rank) and over the
  // replicate dims (its members); row-major, so both ascend.
  auto advance = [&](std::vector<int64_t> &coord, bool onReplicate) {
    for (size_t i = n; i-- > 0;) {
      if (mask[i] != onReplicate)
        continue;
      if (++coord[i] < size[i])
        return;
      coord[i] = 0;
    }
  };
  auto rankOf = [&](const std::vector<int64_t> &coord) {
    int64_t r = 0;
    for (size_t i = 0; i < n; ++i)
      r += coord[i] * stride[i];
    return r;
  };
  std::vector<int64_t> base(n, 0), members;
  const int64_t groups = maxGroups < 0 ? shape.count : std::min(maxGroups, shape.count);
  for (int64_t g = 0; g < groups; ++g, advance(base, false)) {
    members.clear();
    std::vector<int64_t> c = base;
    const int64_t listed = maxMembers < 0 ? shape.size : std::min(maxMembers, shape.size);
    for (int64_t k = 0; k < listed; ++k, advance(c, true))
      members.push_back(rankOf(c));
    visit(static_cast<const std::vector<int64_t> &>(members));
  }
}

} // namespace dmuon::common

#endif
