// `--mesh auto:N[,dim=size...]`: the meshes of N ranks dmuonc chooses among
// (docs/dmuonc.md, "Choosing the mesh"). The model-parallel dims after N are
// fixed as given; auto enumerates the ownership factorization
// dp_replicate x dp_shard of what they leave.
#ifndef DMUON_COMPILER_AUTOMESH_H
#define DMUON_COMPILER_AUTOMESH_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dmuon {

class Diagnostics;

struct AutoMeshSpec {
  int64_t ranks = 0;             // N
  std::string modelParallelText; // ",tp=8" as given (kinds included), or ""
  // The pipeline (stage) dim as given ("pp=4"), or "": it leads each
  // candidate, so a stage's ranks are one contiguous block.
  std::string stageText;
  int64_t modelParallelSize = 1; // the product of those dims' sizes
};

// Whether `--mesh` asks for the search: "auto" or "auto:...".
bool isAutoMesh(std::string_view text);

// Parses "auto:N[,name=size[:data|:model],...]". Reports errors located in
// the mesh text (<mesh>:1:col) and returns false on any.
bool parseAutoMesh(std::string_view text, AutoMeshSpec &out, Diagnostics &diags);

// One candidate mesh: `text` is what --mesh takes to plan it alone.
struct MeshCandidate {
  int64_t replicas = 1, shards = 1;
  std::string text; // "dp_replicate=2,dp_shard=4,tp=8"; no dp_replicate when 1
};

// Every dp_replicate x dp_shard = ranks / modelParallelSize, fewest
// replicas first (after the stage dim, if any).
std::vector<MeshCandidate> autoMeshCandidates(const AutoMeshSpec &spec);

} // namespace dmuon

#endif
