// Reading a plan file (or any file) whole, before it is verified.
#ifndef DMUON_PLAN_READFILE_H
#define DMUON_PLAN_READFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::planfile {

// Reads a whole file of at most the largest a plan can be (2 GiB,
// common::kMaxPlanBytes); a larger file, a FIFO or a device giving more is
// refused without being read whole. Returns an empty string on success,
// else a message.
std::string readFile(const std::string &path, std::vector<uint8_t> &out);
// The same with another limit.
std::string readFile(const std::string &path, std::vector<uint8_t> &out, uint64_t maxBytes);

} // namespace dmuon::planfile

#endif
