// Reading a file whole (ReadFile.h).
#include "plan/ReadFile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

namespace dmuon::planfile {

std::string readFile(const std::string &path, std::vector<uint8_t> &out) {
  out.clear();
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return std::strerror(errno);
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fclose(f);
    return std::strerror(EISDIR);
  }
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0)
    out.insert(out.end(), chunk, chunk + n);
  if (std::ferror(f)) {
    int err = errno;
    std::fclose(f);
    out.clear();
    return err ? std::strerror(err) : "read error";
  }
  std::fclose(f);
  return {};
}

} // namespace dmuon::planfile
