// What the printers share (PrintCommon.h).
#include "plan/print/PrintCommon.h"

#include "common/MeshIndex.h"
#include "common/PlanRules.h"
#include "common/ShardChunks.h"
#include "plan/Features.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace dmuon::planfile::print {

std::string num(int64_t v) { return std::to_string(v); }

std::string num(double v) {
  if (v == 0)
    return "0";
  char buf[512];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (r.ec != std::errc())
    return "?";
  return std::string(buf, r.ptr);
}

std::string fixed4(double v) {
  char buf[512];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 4);
  if (r.ec != std::errc())
    return "?";
  return std::string(buf, r.ptr);
}

std::string humanBytes(double bytes, int largest) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < largest && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

std::string stageName(const plan::Plan &p) {
  const char *n = plan::EnumNameStage(p.stage());
  return n && *n ? n : "?";
}

std::string placementString(const plan::Placement &pl) {
  switch (pl.kind()) {
  case plan::PlacementKind::replicate:
    return "Replicate";
  case plan::PlacementKind::shard:
    return "Shard(" + num(int64_t(pl.dim())) + ")";
  case plan::PlacementKind::strided_shard:
    return "StridedShard(" + num(int64_t(pl.dim())) + ", " +
           num(int64_t(pl.split_factor())) + ")";
  case plan::PlacementKind::partial:
    return "Partial(" + (pl.reduce_op() ? pl.reduce_op()->str() : std::string("sum")) + ")";
  }
  return "?";
}

bool localDiffers(const plan::Param &q) {
  if (!q.local_shape())
    return false;
  if (size(q.local_shape()) != size(q.shape()))
    return true;
  for (uint32_t i = 0; i < size(q.shape()); ++i)
    if (q.local_shape()->Get(i) != q.shape()->Get(i))
      return true;
  return false;
}

std::vector<int64_t> smallestLocalShape(const plan::Param &q, const plan::Mesh *mesh) {
  if (!mesh || !q.local_shape() || !q.shape())
    return {};
  const common::ShardLayout layout = common::shardLayoutOf(q, *mesh);
  std::vector<int64_t> smallest;
  bool uneven = false;
  for (uint32_t d = 0; d < size(q.shape()); ++d) {
    const std::vector<int64_t> sizes =
        common::chunkSizesOf(q.shape()->Get(d), layout, static_cast<int>(d));
    smallest.push_back(sizes.front());
    uneven |= sizes.size() > 1;
  }
  return uneven ? smallest : std::vector<int64_t>{};
}

ListedReplicateGroups listReplicateGroups(const MeshView &m, const plan::CommGroup &g) {
  ListedReplicateGroups out;
  int64_t budget = kMaxListed;
  auto take = [&](const std::vector<int64_t> &ranks, int64_t whole) {
    const int64_t n = std::min<int64_t>(budget, static_cast<int64_t>(ranks.size()));
    out.groups.emplace_back(ranks.begin(), ranks.begin() + n);
    out.cut = out.cut || n < whole;
    budget -= n;
  };
  if (g.replicate_groups()) {
    out.count = g.replicate_groups()->size();
    for (uint32_t k = 0; k < g.replicate_groups()->size() && budget > 0; ++k) {
      const auto *rl = g.replicate_groups()->Get(k)->ranks();
      std::vector<int64_t> ranks;
      if (rl)
        ranks.assign(rl->begin(), rl->end());
      out.size = std::max<int64_t>(out.size, static_cast<int64_t>(ranks.size()));
      take(ranks, static_cast<int64_t>(ranks.size()));
    }
  } else {
    std::vector<int> dims;
    if (g.replicate_mesh_dims())
      dims.assign(g.replicate_mesh_dims()->begin(), g.replicate_mesh_dims()->end());
    const common::ReplicateGroupShape shape = common::replicateGroupShape(m.dims, dims);
    out.count = shape.count;
    out.size = shape.size;
    const int64_t groups = std::max<int64_t>(1, kMaxListed / shape.size);
    common::forEachReplicateGroup(
        m.dims, dims, groups, [&](const std::vector<int64_t> &r) { take(r, shape.size); },
        kMaxListed);
  }
  out.cut = out.cut || static_cast<int64_t>(out.groups.size()) < out.count;
  return out;
}

std::string MeshView::dataString(int64_t d, const flatbuffers::Vector<int32_t> *onDims) const {
  if (D == 1 || !onDims || onDims->size() == 0)
    return {};
  const std::vector<int64_t> coord =
      common::dataCoordsOf(dims, d, [&](int i) { return carriesData[i]; });
  std::string s;
  for (int32_t m : *onDims)
    if (m >= 0 && m < static_cast<int32_t>(dims.size()))
      s += (s.empty() ? "" : ",") + dimNames[m] + "=" + num(coord[m]);
  return " data=(" + s + ")";
}

std::string MeshView::meshString() const {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    s.append(i ? "," : "").append(dimNames[i] + "=" + num(dims[i]));
    const bool ownership = static_cast<int>(i) == shardDim || static_cast<int>(i) == replicateDim;
    const bool stage = static_cast<int>(i) == stageDim;
    if (!ownership && stage != common::isStageByDefault(dimNames[i]))
      s += stage ? ":stage" : carriesData[i] ? ":data" : ":model";
    else if (!ownership && !stage && carriesData[i] != common::carriesDataByDefault(dimNames[i]))
      s += carriesData[i] ? ":data" : ":model";
  }
  return s;
}

std::string MeshView::coords(int64_t rank) const {
  const std::vector<int64_t> c = coord(rank);
  std::string o = "(";
  for (size_t i = 0; i < c.size(); ++i)
    o.append(i ? "," : "").append(num(c[i]));
  return o + ")";
}

} // namespace dmuon::planfile::print
