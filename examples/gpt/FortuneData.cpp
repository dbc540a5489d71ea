#include "FortuneData.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace gpt {
namespace {

namespace fs = std::filesystem;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

torch::Tensor windows(const std::vector<uint8_t> &text, const std::vector<int64_t> &offsets,
                      int64_t length) {
  torch::Tensor out = torch::empty({int64_t(offsets.size()), length}, torch::kLong);
  auto a = out.accessor<int64_t, 2>();
  for (size_t i = 0; i < offsets.size(); ++i)
    for (int64_t t = 0; t < length; ++t)
      a[int64_t(i)][t] = text[size_t(offsets[i] + t)];
  return out;
}

void needLength(const std::vector<uint8_t> &text, int64_t length, const char *split) {
  if (int64_t(text.size()) <= length)
    throw std::runtime_error(std::string("the ") + split + " split is shorter than a window");
}

} // namespace

FortuneData::FortuneData(const std::string &dir) {
  std::vector<fs::path> paths;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8")
      paths.push_back(e.path());
  }
  if (ec)
    throw std::runtime_error("cannot read '" + dir + "': " + ec.message() +
                             " (install Debian's fortunes package)");
  std::sort(paths.begin(), paths.end());
  for (const fs::path &p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    const size_t cut = bytes.size() * 9 / 10;
    train_.insert(train_.end(), bytes.begin(), bytes.begin() + long(cut));
    val_.insert(val_.end(), bytes.begin() + long(cut), bytes.end());
  }
  files_ = paths.size();
  if (files_ == 0)
    throw std::runtime_error("no fortune databases in '" + dir +
                             "' (install Debian's fortunes package)");
}

torch::Tensor FortuneData::trainBatch(uint64_t seed, int64_t step, int64_t first, int64_t count,
                                      int64_t length) const {
  needLength(train_, length, "training");
  const auto range = uint64_t(int64_t(train_.size()) - length + 1);
  std::vector<int64_t> offsets;
  for (int64_t row = first; row < first + count; ++row) {
    const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(step)) ^ uint64_t(row));
    offsets.push_back(int64_t(h % range));
  }
  return windows(train_, offsets, length);
}

torch::Tensor FortuneData::validationBatch(int64_t total, int64_t first, int64_t count,
                                           int64_t length) const {
  needLength(val_, length, "validation");
  const int64_t range = int64_t(val_.size()) - length + 1;
  std::vector<int64_t> offsets;
  for (int64_t row = first; row < first + count; ++row)
    offsets.push_back(row * range / total);
  return windows(val_, offsets, length);
}

} // namespace gpt
