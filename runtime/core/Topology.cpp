#include "core/Topology.h"

#include "common/MeshIndex.h"
#include "plan/PlanView.h"

namespace dmuon::rt {

Topology Topology::of(const dmuon::plan::Plan &plan, int rank) {
  const PlanView view(plan);
  Topology t;
  t.rank = rank;
  t.G = static_cast<int>(view.G);
  t.R = static_cast<int>(view.R);
  t.shardDim = view.shardDim;
  t.replicateDim = view.replicateDim;
  t.dimSizes.assign(view.dims.begin(), view.dims.end());
  t.carriesData = view.carriesData;
  const int64_t dataParallel = plan.mesh()->data_parallel_size();
  t.dataParallelSize = dataParallel > 0 ? dataParallel : int64_t(t.G) * t.R;
  for (int64_t c : view.coord(rank))
    t.coord.push_back(static_cast<int>(c));
  t.s = t.shardDim >= 0 ? t.coord[t.shardDim] : 0;
  t.r = t.replicateDim >= 0 ? t.coord[t.replicateDim] : 0;
  if (plan.mesh()->num_stages() > 1 && plan.mesh()->stage_dim() >= 0) {
    t.stageDim = plan.mesh()->stage_dim();
    t.stage = t.coord[t.stageDim];
  }
  return t;
}

int Topology::rankOf(const std::vector<int> &c) const {
  return static_cast<int>(common::rowMajorRank(dimSizes, c));
}

int Topology::rankAtSlot(int slotS, int slotR) const {
  std::vector<int> c = coord;
  if (shardDim >= 0)
    c[shardDim] = slotS;
  if (replicateDim >= 0)
    c[replicateDim] = slotR;
  return rankOf(c);
}

Status Topology::createOwnershipGroups(Backend &backend) const {
  // Colour each group by its lowest rank; order ranks inside by coordinate.
  return backend.createGroups({rankAtSlot(0, r), s}, {rankAtSlot(s, 0), r},
                              {rankAtSlot(0, 0), dataParallelRank(s, r)});
}

Status Topology::groupAlong(Backend &backend, const std::vector<int> &dims, Communicator &out) {
  auto it = along.find(dims);
  if (it == along.end()) {
    // Colour: the group's rank at coordinate 0 along the dims; key: the
    // row-major index along them.
    std::vector<int> c0 = coord;
    for (int d : dims)
      c0[d] = 0;
    Communicator g;
    DMUON_RETURN_IF_ERROR(backend.createGroup({rankOf(c0), indexAlong(dims, coord)}, g));
    it = along.emplace(dims, g).first;
  }
  out = it->second;
  return Status::ok();
}

int Topology::indexAlong(const std::vector<int> &dims, const std::vector<int> &c) const {
  int index = 0;
  for (int d : dims)
    index = index * dimSizes[d] + c[d];
  return index;
}

std::vector<int> Topology::withDataIndex(int64_t dataIndex) const {
  const std::vector<int64_t> data =
      common::dataCoordsOf(dimSizes, dataIndex, [&](int i) { return carriesData[i]; });
  std::vector<int> c = coord;
  for (size_t i = 0; i < c.size(); ++i)
    if (carriesData[i])
      c[i] = static_cast<int>(data[i]);
  return c;
}

int Topology::sizeAlong(const std::vector<int> &dims) const {
  int n = 1;
  for (int d : dims)
    n *= dimSizes[d];
  return n;
}

} // namespace dmuon::rt
