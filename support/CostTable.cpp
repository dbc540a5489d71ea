#include "support/CostTable.h"
#include "support/InputFile.h"

#include "llvm/Support/MemoryBuffer.h"

#include <charconv>
#include <cmath>
#include <vector>

namespace dmuon {

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

struct Field {
  std::string_view text; // trimmed
  unsigned col;          // 1-based column of the trimmed text (or of the field)
};

// Splits one line (comment already removed) at commas, trimming each field.
std::vector<Field> splitFields(std::string_view line) {
  std::vector<Field> out;
  size_t b = 0;
  while (true) {
    size_t e = line.find(',', b);
    size_t end = e == std::string_view::npos ? line.size() : e;
    size_t s = b, t = end;
    while (s < t && isSpace(line[s]))
      ++s;
    while (t > s && isSpace(line[t - 1]))
      --t;
    out.push_back({line.substr(s, t - s), static_cast<unsigned>((s < t ? s : b) + 1)});
    if (e == std::string_view::npos)
      break;
    b = e + 1;
  }
  return out;
}

std::string shapeString(int64_t r, int64_t c) {
  return std::to_string(r) + "x" + std::to_string(c);
}

bool parseDim(std::string_view s, int64_t &out) {
  if (s.empty() || s.size() > 15)
    return false;
  for (char c : s)
    if (c < '0' || c > '9')
      return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && out > 0;
}

bool parseSeconds(std::string_view s, double &out) {
  if (s.empty())
    return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(out) && out > 0;
}

bool parseBuffer(unsigned buffer, std::string_view text, Diagnostics &diags, CostTableMap &out) {
  const unsigned before = diags.errorCount();
  bool sawHeader = false;
  std::map<std::pair<int64_t, int64_t>, unsigned> lineOf;
  unsigned lineNo = 0;
  size_t pos = 0;
  auto at = [&](unsigned col) { return diags.locFor(buffer, lineNo, col); };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++lineNo;
    if (size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    size_t first = 0;
    while (first < line.size() && isSpace(line[first]))
      ++first;
    if (first == line.size())
      continue;
    std::vector<Field> f = splitFields(line);
    if (!sawHeader) {
      sawHeader = true;
      static const char *kHeader[] = {"rows", "cols", "seconds"};
      bool ok = f.size() == 3;
      for (size_t i = 0; ok && i < 3; ++i)
        ok = f[i].text == kHeader[i];
      if (!ok)
        diags.error(at(static_cast<unsigned>(first + 1)),
                    "expected the header line 'rows,cols,seconds'");
      continue;
    }
    if (f.size() != 3) {
      unsigned col = f.size() > 3 ? f[3].col : static_cast<unsigned>(line.size() + 1);
      diags.error(at(col), "expected 3 fields (rows,cols,seconds), found " +
                               llvm::Twine(static_cast<unsigned>(f.size())));
      continue;
    }
    int64_t rows = 0, cols = 0;
    double seconds = 0;
    bool ok = true;
    if (!parseDim(f[0].text, rows)) {
      diags.error(at(f[0].col),
                  "rows must be a positive integer, not '" +
                      llvm::Twine(llvm::StringRef(f[0].text.data(), f[0].text.size())) + "'");
      ok = false;
    }
    if (!parseDim(f[1].text, cols)) {
      diags.error(at(f[1].col),
                  "cols must be a positive integer, not '" +
                      llvm::Twine(llvm::StringRef(f[1].text.data(), f[1].text.size())) + "'");
      ok = false;
    }
    if (!parseSeconds(f[2].text, seconds)) {
      diags.error(at(f[2].col),
                  "seconds must be a positive finite number, not '" +
                      llvm::Twine(llvm::StringRef(f[2].text.data(), f[2].text.size())) + "'");
      ok = false;
    } else if (seconds > kMaxCostSeconds) {
      diags.error(at(f[2].col),
                  "seconds must be at most " + llvm::Twine(static_cast<int>(kMaxCostSeconds)) +
                      " (a day), not '" +
                      llvm::Twine(llvm::StringRef(f[2].text.data(), f[2].text.size())) + "'");
      ok = false;
    }
    if (!ok)
      continue;
    auto [it, inserted] = lineOf.try_emplace({rows, cols}, lineNo);
    if (!inserted) {
      diags.error(at(f[0].col), "duplicate shape " + shapeString(rows, cols) +
                                    " (first given on line " + llvm::Twine(it->second) + ")");
      continue;
    }
    out[{rows, cols}] = seconds;
  }
  if (!sawHeader && diags.errorCount() == before)
    diags.error(diags.locFor(buffer, 1, 1),
                "empty cost table: expected the header line 'rows,cols,seconds'");
  return diags.errorCount() == before;
}

} // namespace

bool parseCostTable(std::string_view text, const std::string &name, Diagnostics &diags,
                    CostTableMap &out) {
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text.data(), text.size()), name);
  llvm::StringRef contents = buf->getBuffer();
  unsigned id = diags.addBuffer(std::move(buf));
  return parseBuffer(id, std::string_view(contents.data(), contents.size()), diags, out);
}

bool loadCostTable(const std::string &path, Diagnostics &diags, CostTableMap &out) {
  std::unique_ptr<llvm::MemoryBuffer> buf =
      readInputFile(path, diags, kMaxCostTableBytes, "a cost table");
  if (!buf)
    return false;
  llvm::StringRef contents = buf->getBuffer();
  unsigned id = diags.addBuffer(std::move(buf));
  return parseBuffer(id, std::string_view(contents.data(), contents.size()), diags, out);
}

std::optional<double> lookupCost(const CostTableMap &table, int64_t rows, int64_t cols) {
  auto it = table.find({rows, cols});
  if (it == table.end())
    it = table.find({cols, rows});
  if (it == table.end())
    return std::nullopt;
  return it->second;
}

} // namespace dmuon
