// `dmuonc --mesh auto:N --cluster=cluster.toml`: plans the model on every
// candidate mesh of N ranks (compiler/AutoMesh.h) in each mode, simulates
// each plan on the cluster, prints the ranked table on stderr and returns
// the plan of the best candidate that fits the device's memory
// (docs/dmuonc.md, "Choosing the mesh").
#ifndef DMUON_COMPILER_AUTOSEARCH_H
#define DMUON_COMPILER_AUTOSEARCH_H

#include "DriverOptions.h"
#include "PlanWriter.h"
#include "support/Diagnostics.h"

#include <optional>

namespace dmuon {

// The input is parsed once per distinct list of mesh dim names (placements
// resolve by name), each mesh's passes up to layout run once, and only
// rank-figures runs per mode. On success `plan` holds the chosen plan,
// byte for byte what `dmuonc --mesh <chosen> --mode=<chosen>` writes with
// the same options. False after reporting errors (none fits included).
bool searchAutoMesh(const DriverConfig &config, std::optional<PlanBuffer> &plan,
                    Diagnostics &diags);

} // namespace dmuon

#endif
