#include "support/ByteSize.h"

#include "llvm/ADT/StringRef.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace dmuon {

std::optional<double> parseByteSize(std::string_view text) {
  llvm::StringRef s(text.data(), text.size());
  s = s.trim();
  size_t numEnd = 0;
  while (numEnd < s.size() && (std::isdigit(static_cast<unsigned char>(s[numEnd])) ||
                               s[numEnd] == '.' || s[numEnd] == 'e' || s[numEnd] == 'E' ||
                               ((s[numEnd] == '+' || s[numEnd] == '-') && numEnd > 0 &&
                                (s[numEnd - 1] == 'e' || s[numEnd - 1] == 'E'))))
    ++numEnd;
  // "1e" would swallow the E of "EB"; no such unit is accepted, so no care.
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + numEnd, v);
  if (numEnd == 0 || r.ec != std::errc() || r.ptr != s.data() + numEnd)
    return std::nullopt;
  llvm::StringRef unit = s.substr(numEnd).trim();
  struct Unit {
    const char *name;
    double scale;
  };
  static const Unit kUnits[] = {{"", 1},          {"B", 1},           {"KB", 1e3},
                                {"MB", 1e6},      {"GB", 1e9},        {"TB", 1e12},
                                {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                {"TiB", 1099511627776.0}};
  for (const Unit &u : kUnits)
    if (unit == u.name) {
      double bytes = v * u.scale;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > std::ldexp(1.0, 62))
        return std::nullopt;
      return bytes;
    }
  return std::nullopt;
}

} // namespace dmuon
