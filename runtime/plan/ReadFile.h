// Reading a plan file (or any file) whole, before it is verified.
#ifndef DMUON_RUNTIME_PLAN_READFILE_H
#define DMUON_RUNTIME_PLAN_READFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::planfile {

// Reads a whole file. Returns an empty string on success, else a message.
std::string readFile(const std::string &path, std::vector<uint8_t> &out);

} // namespace dmuon::planfile

#endif
