// Byte-level training text: the fortune cookie databases of Debian's
// `fortunes` packages (/usr/share/games/fortunes), real English prose,
// quotations and jokes, about 2.5 MB.
//
// Deterministic on every rank: the plain database files (not the .dat
// indexes nor the .u8 links) in name order; the first 90% of each file goes
// to the training split and the last 10% to the validation split, so both
// splits see every file.
#ifndef DMUON_EXAMPLES_GPT_FORTUNEDATA_H
#define DMUON_EXAMPLES_GPT_FORTUNEDATA_H

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

class FortuneData {
public:
  static constexpr const char *kDefaultDir = "/usr/share/games/fortunes";

  // Throws std::runtime_error when the directory has no database.
  explicit FortuneData(const std::string &dir = kDefaultDir);

  size_t files() const { return files_; }
  const std::vector<uint8_t> &train() const { return train_; }
  const std::vector<uint8_t> &validation() const { return val_; }

  // Windows [count, length] of the global training batch of `step`, rows
  // [first, first + count): each rank takes its own equal slice of the same
  // global batch. Offsets are a hash of (seed, step, row), so any slice of
  // any step is drawn without drawing the others.
  torch::Tensor trainBatch(uint64_t seed, int64_t step, int64_t first, int64_t count,
                           int64_t length) const;
  // Rows [first, first + count) of the fixed validation set: `total` windows
  // evenly spaced over the validation split.
  torch::Tensor validationBatch(int64_t total, int64_t first, int64_t count,
                                int64_t length) const;

private:
  std::vector<uint8_t> train_, val_;
  size_t files_ = 0;
};

} // namespace gpt

#endif
