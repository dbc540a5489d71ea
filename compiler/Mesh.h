// The device mesh: named dims, row-major rank order (docs/dmuonc.md, --mesh).
// A model-parallel dim either carries data (its coordinates see different
// tokens: ep, cp by default) or not (tp, ...: the same tokens); a stage dim
// (pp by default) holds different params at each coordinate: pipeline stages.
#ifndef DMUON_COMPILER_MESH_H
#define DMUON_COMPILER_MESH_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dmuon {

class Diagnostics;
struct MeshSource;

struct MeshDim {
  std::string name;
  int64_t size = 1;
  bool carriesData = false; // model-parallel dims only
  bool isStage = false;     // the pipeline dim: its coordinates are stages
  // Where ":data" / ":model" / ":stage" was given in --mesh (-1: the default
  // by name).
  int kindColumn = -1;
};


struct Mesh {
  std::vector<MeshDim> dims;
  int shardDim = -1;     // index of dp_shard, -1 if absent
  int replicateDim = -1; // index of dp_replicate, -1 if absent
  int stageDim = -1;     // index of the pipeline dim (pp), -1 if absent

  int64_t numStages() const { return stageDim < 0 ? 1 : dims[stageDim].size; }
  // The pipeline stage of a mesh coordinate (0 without a stage dim).
  int64_t stageOf(const std::vector<int64_t> &coord) const {
    return stageDim < 0 ? 0 : coord[stageDim];
  }

  int64_t worldSize() const;
  int64_t numShards() const;   // G
  int64_t numReplicas() const; // R
  int64_t numSlots() const { return numShards() * numReplicas(); }
  // The product of the data-carrying dims' sizes, and the ranks whose data
  // meet in an averaged gradient: G * R * that.
  int64_t dataCarryingSize() const;
  int64_t dataParallelSize() const { return numSlots() * dataCarryingSize(); }
  bool isOwnershipDim(int i) const { return i == shardDim || i == replicateDim; }
  int findDim(std::string_view name) const;

  std::vector<int64_t> coordOf(int64_t rank) const;
  int64_t rankOf(const std::vector<int64_t> &coord) const;
  // Slot index s + r*G; the rank of slot (s, r) with every other dim at 0.
  int64_t slotRank(int64_t shard, int64_t replicate) const;
  // Fine slots: an owner slot (s, r) and a data index d (the coordinates on
  // the data-carrying dims, row-major over them); index slot * D + d.
  int64_t numFineSlots() const { return numSlots() * dataCarryingSize(); }
  int64_t dataIndexOf(const std::vector<int64_t> &coord) const;
  // The rank of fine slot (s, r, d) of pipeline stage `stage`: every other
  // model-parallel dim at 0.
  int64_t ownerRank(int64_t shard, int64_t replicate, int64_t dataIndex, int64_t stage = 0) const;
  // Data index d's coordinates on `onDims` (data-carrying dims, ascending),
  // row-major over them; and the data index with coordinates from such an
  // index on `onDims` and 0 on the other data-carrying dims.
  int64_t projectDataIndex(int64_t dataIndex, const std::vector<int> &onDims) const;
  int64_t embedDataIndex(int64_t index, const std::vector<int> &onDims) const;
  int64_t sizeOfDims(const std::vector<int> &meshDims) const;
  std::string str() const; // "dp_replicate=2,dp_shard=4"
};

// Largest world dmuonc plans for; keeps every rank and slot in 32 bits.
inline constexpr int64_t kMaxMeshRanks = int64_t(1) << 24;

// Parses `--mesh`: "8" (dp_shard=8), "2x4" (dp_replicate=2 x dp_shard=4) or
// "name=size[:data|:model|:stage],...". With `dataCarryingDims` (--data-carrying-
// dims, comma-separated, "" for none) exactly those model-parallel dims carry
// data, and a dim whose kind the mesh gives explicitly must agree. Reports
// errors with the column into the text; returns false on any error.
bool parseMesh(std::string_view text, Mesh &out, Diagnostics &diags,
               const std::optional<std::string> &dataCarryingDims = std::nullopt);

// The digits at `pos` in `text` as a size (pos left after them), saturating
// at kMaxMeshRanks + 1 for the caller to report; false when there are none.
bool parseMeshSize(std::string_view text, size_t &pos, int64_t &v);

// One "name=size[:data|:model]" item of a named mesh at `pos` in `text`
// (left after it): the grammar parseMesh and `--mesh auto:N,...`
// (AutoMesh.h) share. Which names are allowed where is the caller's to check.
// Reports errors located in `src` (the mesh text) and returns false on any.
struct NamedMeshDim {
  std::string name;
  size_t nameCol = 0, sizeCol = 0;
  int64_t size = 0; // past kMaxMeshRanks: kMaxMeshRanks + 1
  int kindColumn = -1;      // the ':' of ":data" / ":model" / ":stage"; -1 when none
  bool carriesData = false; // ":data" (with kindColumn >= 0)
  bool isStage = false;     // ":stage" (with kindColumn >= 0)
};
bool parseNamedMeshDim(std::string_view text, size_t &pos, const MeshSource &src,
                       NamedMeshDim &out, Diagnostics &diags);

} // namespace dmuon

#endif
