// Reading a file whole (ReadFile.h).
#include "plan/ReadFile.h"

#include "common/BoundedRead.h"

namespace dmuon::planfile {

std::string readFile(const std::string &path, std::vector<uint8_t> &out) {
  return readFile(path, out, common::kMaxPlanBytes);
}

std::string readFile(const std::string &path, std::vector<uint8_t> &out, uint64_t maxBytes) {
  return common::readFileBounded(path, maxBytes, "a plan", out);
}

} // namespace dmuon::planfile
