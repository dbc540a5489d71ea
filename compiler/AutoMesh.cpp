#include "AutoMesh.h"

#include "Mesh.h"
#include "common/PlanRules.h"
#include "sim/Simulate.h"
#include "support/Diagnostics.h"

#include <cctype>

namespace dmuon {

bool isAutoMesh(std::string_view text) {
  return text == "auto" || text.substr(0, 5) == "auto:";
}

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
  if (!parseMeshSize(text, pos, spec.ranks))
    return err(pos, "expected the number of ranks after 'auto:'");
  if (spec.ranks < 1)
    return err(ranksCol, "the number of ranks must be at least 1");
  if (spec.ranks > kMaxMeshRanks)
    return err(ranksCol, "mesh has more than " + std::to_string(kMaxMeshRanks) + " ranks");
  // Refused before any candidate is planned: each is simulated on every rank.
  if (spec.ranks > sim::kMaxSimulatedRanks)
    return err(ranksCol, "auto simulates every candidate on every rank and takes at most " +
                             std::to_string(sim::kMaxSimulatedRanks) + " ranks, not " +
                             std::to_string(spec.ranks) + "; give a larger mesh explicitly (e.g. "
                             "'dp_replicate=R,dp_shard=S')");

  std::vector<std::string> names;
  std::string dimsText; // "tp=8", for messages
  while (pos < text.size()) {
    if (text[pos] != ',')
      return err(pos, std::string("unexpected '") + text[pos] +
                          "' in mesh (expected ',' and a model-parallel dim, e.g. "
                          "'auto:1024,tp=8')");
    const size_t dimBegin = ++pos;
    NamedMeshDim dim;
    if (!parseNamedMeshDim(text, pos, src, dim, diags))
      return false;
    const std::string &name = dim.name;
    if (name == "dp" || name == "dp_shard" || name == "dp_replicate")
      return err(dimBegin, "mesh dim '" + name +
                               "' is what auto chooses; after 'auto:N' give only the "
                               "model-parallel dims the model's placements need (e.g. "
                               "'auto:1024,tp=8')");
    for (const std::string &n : names)
      if (n == name)
        return err(dimBegin, "mesh dim '" + name + "' is given twice");
    const int64_t size = dim.size;
    spec.modelParallelSize *= size;
    if (spec.modelParallelSize > kMaxMeshRanks)
      return err(dim.sizeCol, "mesh has more than " + std::to_string(kMaxMeshRanks) + " ranks");
    names.push_back(name);
    dimsText += (dimsText.empty() ? "" : ",") + name + "=" + std::to_string(size);
    const bool stage = dim.kindColumn >= 0 ? dim.isStage : common::isStageByDefault(name);
    if (stage && spec.stageText.empty())
      spec.stageText = std::string(text.substr(dimBegin, pos - dimBegin));
    else
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
    c.text = (spec.stageText.empty() ? std::string() : spec.stageText + ",") +
             (r > 1 ? "dp_replicate=" + std::to_string(r) + "," : std::string()) +
             "dp_shard=" + std::to_string(c.shards) + spec.modelParallelText;
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace dmuon
