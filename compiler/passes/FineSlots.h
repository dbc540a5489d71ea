// Placing units over the fine slots (docs/partition.md, "Data-carrying
// dims"): the partition pass's units, each of one data class, over every
// owner slot and data index.
#ifndef DMUON_COMPILER_PASSES_FINESLOTS_H
#define DMUON_COMPILER_PASSES_FINESLOTS_H

#include "Model.h"
#include "passes/Partitioner.h"

#include <cstdint>
#include <vector>

namespace dmuon {

// Places the units of `all` (unit u of data class unitClass[u], an index
// into classDims: the data-carrying dims its params are Replicate on) over
// the fine slots. The result's slotOf is each unit's owner slot (s + r * G),
// `dataIndex` its data index, and its loads are per fine slot. The names of
// `all` are lent out and given back.
//
// Three orders of the classes, the lowest maximum kept: coarse first spreads
// the experts evenly and fills around them, which suits many small dense
// units; fine first lets a few large dense matrices (DeepSeek-V3's o_proj at
// ep=64) gather on some owner slots that then take fewer experts; and fine,
// coarse, fine again spreads the dense units into what the experts left.
PartitionResult partitionFine(const Mesh &mesh, const std::vector<std::vector<int>> &classDims,
                              PartitionProblem &all, const std::vector<int> &unitClass,
                              const PartitionOptions &opts, double target,
                              std::vector<int64_t> &dataIndex);

} // namespace dmuon

#endif
