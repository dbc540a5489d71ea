#include "AutoMesh.h"

#include "Diagnostics.h"
#include "Mesh.h"

#include <cctype>

namespace dmuon {

bool isAutoMesh(std::string_view text) {
  return text == "auto" || text.substr(0, 5) == "auto:";
}

namespace {

// Digits at `pos` as a count, saturating past the mesh limit.
bool parseCount(std::string_view text, size_t &pos, int64_t &v) {
  const size_t begin = pos;
  v = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    v = v * 10 + (text[pos] - '0');
    if (v > kMaxMeshRanks)
      v = kMaxMeshRanks + 1;
    ++pos;
  }
  return pos > begin;
}

} // namespace

bool parseAutoMesh(std::string_view text, AutoMeshSpec &out, Diagnostics &diags) {
  const MeshSource src = diags.addMeshSource(text);
  auto err = [&](size_t col, const std::string &msg) {
    diags.error(src.loc(col), msg);
    return false;
  };
  AutoMeshSpec spec;
  if (text.size() < 5 || text[4] != ':')
    return err(4, "expected ':' and the number of ranks after 'auto' (e.g. 'auto:1024', or "
                  "'auto:1024,tp=8' with model-parallel dims)");
  size_t pos = 5;
  const size_t ranksCol = pos;
  if (!parseCount(text, pos, spec.ranks))
    return err(pos, "expected the number of ranks after 'auto:'");
  if (spec.ranks < 1)
    return err(ranksCol, "the number of ranks must be at least 1");
  if (spec.ranks > kMaxMeshRanks)
    return err(ranksCol, "mesh has more than " + std::to_string(kMaxMeshRanks) + " ranks");

  std::vector<std::string> names;
  std::string dimsText; // "tp=8", for messages
  while (pos < text.size()) {
    if (text[pos] != ',')
      return err(pos, std::string("unexpected '") + text[pos] +
                          "' in mesh (expected ',' and a model-parallel dim, e.g. "
                          "'auto:1024,tp=8')");
    const size_t dimBegin = ++pos;
    while (pos < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
      ++pos;
    const std::string name(text.substr(dimBegin, pos - dimBegin));
    if (name.empty())
      return err(dimBegin, "expected a mesh dim name");
    if (name == "dp" || name == "dp_shard" || name == "dp_replicate")
      return err(dimBegin, "mesh dim '" + name +
                               "' is what auto chooses; after 'auto:N' give only the "
                               "model-parallel dims the model's placements need (e.g. "
                               "'auto:1024,tp=8')");
    for (const std::string &n : names)
      if (n == name)
        return err(dimBegin, "mesh dim '" + name + "' is given twice");
    if (pos >= text.size() || text[pos] != '=')
      return err(pos, "expected '=' after mesh dim name '" + name + "'");
    const size_t sizeCol = ++pos;
    int64_t size;
    if (!parseCount(text, pos, size))
      return err(pos, "expected a size for mesh dim '" + name + "'");
    if (size < 1)
      return err(sizeCol, "mesh dim '" + name + "' must have size at least 1");
    if (pos < text.size() && text[pos] == ':') {
      const size_t kindCol = ++pos;
      while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos])))
        ++pos;
      const std::string_view kind = text.substr(kindCol, pos - kindCol);
      if (kind != "data" && kind != "model")
        return err(kindCol, "expected 'data' or 'model' after ':' for mesh dim '" + name + "'");
    }
    spec.modelParallelSize *= size;
    if (spec.modelParallelSize > kMaxMeshRanks)
      return err(sizeCol, "mesh has more than " + std::to_string(kMaxMeshRanks) + " ranks");
    names.push_back(name);
    dimsText += (dimsText.empty() ? "" : ",") + name + "=" + std::to_string(size);
    spec.modelParallelText += "," + std::string(text.substr(dimBegin, pos - dimBegin));
  }
  if (spec.ranks % spec.modelParallelSize != 0)
    return err(ranksCol, std::to_string(spec.ranks) +
                             " ranks are not a multiple of the model-parallel dims' " +
                             std::to_string(spec.modelParallelSize) + " (" + dimsText +
                             "): no dp_replicate x dp_shard fills the rest");
  out = std::move(spec);
  return true;
}

std::vector<MeshCandidate> autoMeshCandidates(const AutoMeshSpec &spec) {
  std::vector<MeshCandidate> out;
  const int64_t owners = spec.ranks / spec.modelParallelSize;
  for (int64_t r = 1; r <= owners; ++r) {
    if (owners % r != 0)
      continue;
    MeshCandidate c;
    c.replicas = r;
    c.shards = owners / r;
    c.text = (r > 1 ? "dp_replicate=" + std::to_string(r) + "," : std::string()) +
             "dp_shard=" + std::to_string(c.shards) + spec.modelParallelText;
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace dmuon
