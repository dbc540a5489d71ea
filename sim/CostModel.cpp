#include "sim/CostModel.h"

#include <algorithm>
#include <cmath>

namespace dmuon::sim {

bool CommOp::empty() const {
  return std::none_of(parts.begin(), parts.end(),
                      [](const Transfer &t) { return t.ranks > 1 && t.bytes > 0; });
}

bool CommOp::inter() const {
  return std::any_of(parts.begin(), parts.end(), [](const Transfer &t) { return t.inter; });
}

double latencySteps(CollKind kind, int64_t n) {
  if (n <= 1)
    return 0;
  switch (kind) {
  case CollKind::AllReduce:
    return 2.0 * static_cast<double>(n - 1);
  case CollKind::AllGather:
  case CollKind::ReduceScatter:
    return static_cast<double>(n - 1);
  case CollKind::Broadcast:
  case CollKind::Reduce:
    return std::ceil(std::log2(static_cast<double>(n)));
  }
  return 0;
}

double busFactor(CollKind kind, int64_t n) {
  if (n <= 1)
    return 0;
  const double f = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (kind) {
  case CollKind::AllReduce:
    return 2 * f;
  case CollKind::AllGather:
  case CollKind::ReduceScatter:
    return f;
  case CollKind::Broadcast:
  case CollKind::Reduce:
    return 1;
  }
  return 0;
}

namespace {
const LinkCost &linkOf(const Cluster &c, const Transfer &t) {
  // A group that spans nodes is bound by the inter-node network; loading a
  // description without one for such a mesh is refused before (Simulate).
  return (t.inter && c.inter.present ? c.inter : c.intra).cost(t.kind);
}
} // namespace

double transferSeconds(const Cluster &c, const Transfer &t) {
  if (t.ranks <= 1 || t.bytes <= 0)
    return 0;
  const LinkCost &l = linkOf(c, t);
  return latencySteps(t.kind, t.ranks) * l.latency * static_cast<double>(std::max<int64_t>(1, t.count)) +
         busFactor(t.kind, t.ranks) * t.bytes / l.bandwidth;
}

double opSeconds(const Cluster &c, const CommOp &op) {
  double bw = 0, lat = 0;
  for (const Transfer &t : op.parts) {
    if (t.ranks <= 1 || t.bytes <= 0)
      continue;
    const LinkCost &l = linkOf(c, t);
    const double tl = latencySteps(t.kind, t.ranks) * l.latency *
                      static_cast<double>(c.coalesced ? 1 : std::max<int64_t>(1, t.count));
    bw += busFactor(t.kind, t.ranks) * t.bytes / l.bandwidth;
    lat = c.coalesced ? std::max(lat, tl) : lat + tl;
  }
  return bw + lat;
}

std::optional<LinkCost> fitLinkCost(CollKind kind, int64_t n,
                                    const std::vector<CollSample> &samples) {
  if (n < 2 || samples.size() < 2)
    return std::nullopt;
  // Weighted least squares of t = a + b B with weights 1/t^2.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CollSample &s : samples) {
    if (!(s.seconds > 0) || !(s.bytes > 0))
      return std::nullopt;
    const double w = 1 / (s.seconds * s.seconds);
    sw += w;
    sx += w * s.bytes;
    sy += w * s.seconds;
    sxx += w * s.bytes * s.bytes;
    sxy += w * s.bytes * s.seconds;
  }
  const double det = sw * sxx - sx * sx;
  if (!(det > 0))
    return std::nullopt;
  double a = (sxx * sy - sx * sxy) / det;
  double b = (sw * sxy - sx * sy) / det;
  if (a < 0) { // through the origin
    a = 0;
    b = sxy / sxx;
  }
  if (!(b > 0))
    return std::nullopt;
  LinkCost l;
  l.latency = a / latencySteps(kind, n);
  l.bandwidth = busFactor(kind, n) / b;
  return l;
}

} // namespace dmuon::sim
