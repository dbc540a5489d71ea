// Sizes as people write them: "80GiB", "141 GB", "1.5e9", "512MiB". Read by
// dmuonc's --device-memory and the cluster descriptions' memory
// (docs/cluster-format.md).
#ifndef DMUON_SUPPORT_BYTESIZE_H
#define DMUON_SUPPORT_BYTESIZE_H

#include <optional>
#include <string_view>

namespace dmuon {

// Bytes of `text`: a number, optionally followed by B, KB, MB, GB, TB, KiB,
// MiB, GiB or TiB; nullopt for anything else (negative, non-finite, an
// unknown unit, more than 2^62 bytes).
std::optional<double> parseByteSize(std::string_view text);

} // namespace dmuon

#endif
