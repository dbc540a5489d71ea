#include "core/Topology.h"

#include "common/MeshIndex.h"

namespace dmuon::rt {

Topology Topology::of(const dmuon::plan::Mesh &mesh, int rank) {
  Topology t;
  t.rank = rank;
  t.G = mesh.num_shards();
  t.R = mesh.num_replicas();
  t.shardDim = mesh.shard_dim();
  t.replicateDim = mesh.replicate_dim();
  for (const dmuon::plan::MeshDim *d : *mesh.dims()) {
    t.dimSizes.push_back(d->size());
    t.carriesData.push_back(d->carries_data());
  }
  t.dataParallelSize =
      mesh.data_parallel_size() > 0 ? mesh.data_parallel_size() : int64_t(t.G) * t.R;
  for (int64_t c : common::rowMajorCoord(t.dimSizes, rank))
    t.coord.push_back(static_cast<int>(c));
  t.s = t.shardDim >= 0 ? t.coord[t.shardDim] : 0;
  t.r = t.replicateDim >= 0 ? t.coord[t.replicateDim] : 0;
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
