#include "Mesh.h"

#include "support/Diagnostics.h"
#include "common/MeshIndex.h"
#include "common/PlanRules.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace dmuon {

int64_t Mesh::worldSize() const {
  int64_t n = 1;
  for (const MeshDim &d : dims)
    n *= d.size;
  return n;
}

int64_t Mesh::numShards() const { return shardDim < 0 ? 1 : dims[shardDim].size; }
int64_t Mesh::numReplicas() const {
  return replicateDim < 0 ? 1 : dims[replicateDim].size;
}

int64_t Mesh::dataCarryingSize() const {
  int64_t n = 1;
  for (const MeshDim &d : dims)
    if (d.carriesData)
      n *= d.size;
  return n;
}

int Mesh::findDim(std::string_view name) const {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].name == name)
      return static_cast<int>(i);
  return -1;
}

namespace {
int64_t sizeOf(const MeshDim &d) { return d.size; }
} // namespace

std::vector<int64_t> Mesh::coordOf(int64_t rank) const {
  return common::rowMajorCoord(dims, rank, sizeOf);
}

int64_t Mesh::rankOf(const std::vector<int64_t> &coord) const {
  return common::rowMajorRank(dims, coord, sizeOf);
}

int64_t Mesh::slotRank(int64_t shard, int64_t replicate) const {
  return common::slotRank(dims, shardDim, replicateDim, shard, replicate, sizeOf);
}

int64_t Mesh::dataIndexOf(const std::vector<int64_t> &coord) const {
  return common::dataIndexOf(dims, coord, [&](int i) { return dims[i].carriesData; }, sizeOf);
}

int64_t Mesh::ownerRank(int64_t shard, int64_t replicate, int64_t dataIndex, int64_t stage) const {
  return common::stageOwnerRank(
      dims, shardDim, replicateDim, stageDim, stage, [&](int i) { return dims[i].carriesData; },
      shard, replicate, dataIndex, sizeOf);
}

int64_t Mesh::sizeOfDims(const std::vector<int> &meshDims) const {
  int64_t n = 1;
  for (int d : meshDims)
    n *= dims[d].size;
  return n;
}

int64_t Mesh::projectDataIndex(int64_t dataIndex, const std::vector<int> &onDims) const {
  int64_t index = 0;
  for (int d : onDims)
    index = index * dims[d].size +
            common::dataCoordOf(dims, dataIndex, d, [&](int i) { return dims[i].carriesData; },
                                sizeOf);
  return index;
}

int64_t Mesh::embedDataIndex(int64_t index, const std::vector<int> &onDims) const {
  std::vector<int64_t> coord(dims.size(), 0);
  for (size_t k = onDims.size(); k-- > 0;) {
    coord[onDims[k]] = index % dims[onDims[k]].size;
    index /= dims[onDims[k]].size;
  }
  return dataIndexOf(coord);
}

std::string Mesh::str() const {
  std::string s;
  for (const MeshDim &d : dims) {
    if (!s.empty())
      s += ',';
    s += d.name + "=" + std::to_string(d.size);
    if (d.isStage != common::isStageByDefault(d.name))
      s += d.isStage ? ":stage" : d.carriesData ? ":data" : ":model";
    else if (!d.isStage && d.carriesData != common::carriesDataByDefault(d.name))
      s += d.carriesData ? ":data" : ":model";
  }
  return s;
}

namespace {

constexpr int64_t kMaxWorld = kMaxMeshRanks;

} // namespace

bool parseMeshSize(std::string_view text, size_t &pos, int64_t &v) {
  size_t b = pos;
  v = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    v = v * 10 + (text[pos] - '0');
    if (v > kMaxWorld)
      v = kMaxWorld + 1; // saturate; reported by the caller
    ++pos;
  }
  return pos > b;
}

namespace {

bool applyDataCarryingDims(std::string_view list, const MeshSource &src, Mesh &mesh,
                           Diagnostics &diags);

} // namespace

bool parseMesh(std::string_view text, Mesh &out, Diagnostics &diags,
               const std::optional<std::string> &dataCarryingDims) {
  MeshSource src = diags.addMeshSource(text);
  Mesh m;
  auto err = [&](size_t col, const std::string &msg) {
    diags.error(src.loc(col), msg);
    return false;
  };
  if (text.empty())
    return err(0, "empty mesh (expected e.g. '8', '2x4' or 'dp_replicate=2,dp_shard=4')");

  bool named = text.find('=') != std::string_view::npos;
  size_t pos = 0;
  if (!named) {
    std::vector<std::pair<size_t, int64_t>> sizes;
    while (true) {
      size_t col = pos;
      int64_t v;
      if (!parseMeshSize(text, pos, v))
        return err(pos, "expected a dimension size");
      if (v < 1)
        return err(col, "mesh dimension size must be at least 1");
      sizes.push_back({col, v});
      if (pos == text.size())
        break;
      if (text[pos] != 'x' && text[pos] != 'X')
        return err(pos, std::string("unexpected '") + text[pos] +
                            "' in mesh (expected 'x' between sizes)");
      ++pos;
    }
    if (sizes.size() > 2)
      return err(sizes[2].first,
                 "a size-only mesh has at most two dims (dp_replicate x dp_shard); "
                 "name the dims for more, e.g. 'dp_replicate=2,dp_shard=2,tp=2'");
    if (sizes.size() == 2) {
      m.dims = {{"dp_replicate", sizes[0].second}, {"dp_shard", sizes[1].second}};
      m.replicateDim = 0;
      m.shardDim = 1;
    } else {
      m.dims = {{"dp_shard", sizes[0].second}};
      m.shardDim = 0;
    }
  } else {
    while (true) {
      NamedMeshDim item;
      if (!parseNamedMeshDim(text, pos, src, item, diags))
        return false;
      std::string &name = item.name;
      if (name == "dp")
        name = "dp_shard"; // the specification's examples call it dp
      if (m.findDim(name) >= 0)
        return err(item.nameCol, "mesh dim '" + name + "' is given twice");
      const bool ownership = name == "dp_shard" || name == "dp_replicate";
      if (name == "dp_shard")
        m.shardDim = static_cast<int>(m.dims.size());
      if (name == "dp_replicate")
        m.replicateDim = static_cast<int>(m.dims.size());
      MeshDim dim{name, item.size, !ownership && common::carriesDataByDefault(name),
                  !ownership && common::isStageByDefault(name), -1};
      if (item.kindColumn >= 0) {
        if (ownership)
          return err(static_cast<size_t>(item.kindColumn),
                     "mesh dim '" + name +
                         "' is a data-parallel (ownership) dim; "
                         "':data', ':model' and ':stage' are for model-parallel dims");
        dim.carriesData = item.carriesData;
        dim.isStage = item.isStage;
        dim.kindColumn = item.kindColumn;
      }
      if (dim.isStage) {
        if (m.stageDim >= 0)
          return err(item.kindColumn >= 0 ? static_cast<size_t>(item.kindColumn) : item.nameCol,
                     "mesh dim '" + name + "' is a second pipeline (stage) dim; mesh dim '" +
                         m.dims[m.stageDim].name + "' is the first (a mesh has at most one)");
        m.stageDim = static_cast<int>(m.dims.size());
      }
      m.dims.push_back(std::move(dim));
      if (pos == text.size())
        break;
      if (text[pos] != ',')
        return err(pos, std::string("unexpected '") + text[pos] +
                            "' in mesh (expected ',' between dims)");
      ++pos;
    }
  }
  int64_t world = 1;
  for (const MeshDim &d : m.dims) {
    world *= d.size;
    if (world > kMaxWorld)
      return err(0, "mesh has more than " + std::to_string(kMaxWorld) + " ranks");
  }
  if (dataCarryingDims && !applyDataCarryingDims(*dataCarryingDims, src, m, diags))
    return false;
  out = std::move(m);
  return true;
}

bool parseNamedMeshDim(std::string_view text, size_t &pos, const MeshSource &src,
                       NamedMeshDim &out, Diagnostics &diags) {
  auto err = [&](size_t col, const std::string &msg) {
    diags.error(src.loc(col), msg);
    return false;
  };
  NamedMeshDim d;
  d.nameCol = pos;
  while (pos < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
    ++pos;
  d.name = std::string(text.substr(d.nameCol, pos - d.nameCol));
  if (d.name.empty())
    return err(d.nameCol, "expected a mesh dim name");
  if (pos >= text.size() || text[pos] != '=')
    return err(pos, "expected '=' after mesh dim name '" + d.name + "'");
  d.sizeCol = ++pos;
  if (!parseMeshSize(text, pos, d.size))
    return err(pos, "expected a size for mesh dim '" + d.name + "'");
  if (d.size < 1)
    return err(d.sizeCol, "mesh dim '" + d.name + "' must have size at least 1");
  if (pos < text.size() && text[pos] == ':') {
    d.kindColumn = static_cast<int>(pos++);
    const size_t b = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos])))
      ++pos;
    const std::string_view kind = text.substr(b, pos - b);
    if (kind != "data" && kind != "model" && kind != "stage")
      return err(b, "expected 'data', 'model' or 'stage' after ':' for mesh dim '" + d.name + "'");
    d.carriesData = kind == "data";
    d.isStage = kind == "stage";
  }
  out = std::move(d);
  return true;
}

namespace {

bool applyDataCarryingDims(std::string_view list, const MeshSource &src, Mesh &mesh,
                           Diagnostics &diags) {
  std::vector<bool> listed(mesh.dims.size(), false);
  bool ok = true;
  size_t pos = 0;
  while (pos <= list.size() && !list.empty()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string name(list.substr(pos, end - pos));
    const int d = mesh.findDim(name);
    if (d < 0) {
      diags.error("--data-carrying-dims: the mesh has no dim '" + name + "' (it has " +
                  mesh.str() + ")");
      ok = false;
    } else if (mesh.isOwnershipDim(d)) {
      diags.error("--data-carrying-dims: '" + name +
                  "' is a data-parallel (ownership) dim; list model-parallel dims only");
      ok = false;
    } else if (d == mesh.stageDim) {
      diags.error("--data-carrying-dims: '" + name +
                  "' is the pipeline (stage) dim; its ranks hold different params, not data");
      ok = false;
    } else {
      listed[d] = true;
    }
    pos = end + 1;
  }
  for (size_t d = 0; ok && d < mesh.dims.size(); ++d) {
    MeshDim &dim = mesh.dims[d];
    if (mesh.isOwnershipDim(static_cast<int>(d)) || dim.isStage)
      continue;
    if (dim.kindColumn >= 0 && dim.carriesData != listed[d]) {
      diags.error(src.loc(static_cast<size_t>(dim.kindColumn)),
                  "mesh dim '" + dim.name + "' is declared '" +
                      (dim.carriesData ? ":data" : ":model") +
                      "' here but --data-carrying-dims " +
                      (listed[d] ? "lists it" : "does not list it"));
      ok = false;
    }
    dim.carriesData = listed[d];
  }
  return ok;
}

} // namespace

} // namespace dmuon
