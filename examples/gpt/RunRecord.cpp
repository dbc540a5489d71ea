#include "RunRecord.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gpt {
namespace {

std::string cell(const std::optional<double> &v) {
  if (!v)
    return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", *v); // round-trips exactly; "nan", "inf" too
  return buf;
}

std::optional<double> parseCell(const std::string &s) {
  if (s.empty())
    return std::nullopt;
  return std::stod(s);
}

// Infinite unless both are finite: a diverged run never passes.
double relative(double a, double b) {
  const double r = std::abs(a - b) / std::max(std::abs(b), 1e-30);
  return std::isfinite(a) && std::isfinite(b) && std::isfinite(r) ? r : INFINITY;
}

} // namespace

void writeLossCsv(const std::string &path, const std::vector<LossRow> &rows) {
  std::ofstream out(path);
  out << "step,train_loss,val_loss,seconds\n";
  for (const LossRow &r : rows)
    out << r.step << ',' << cell(r.train) << ',' << cell(r.val) << ',' << cell(r.seconds) << '\n';
  if (!out)
    throw std::runtime_error("cannot write '" + path + "'");
}

std::vector<LossRow> readLossCsv(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read '" + path + "'");
  std::vector<LossRow> rows;
  std::string line;
  std::getline(in, line); // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');)
      f.push_back(c);
    f.resize(4);
    rows.push_back({std::stoi(f[0]), parseCell(f[1]), parseCell(f[2]), parseCell(f[3])});
  }
  return rows;
}

void saveParams(const std::string &path, torch::nn::Module &model) {
  torch::serialize::OutputArchive archive;
  for (const auto &np : model.named_parameters())
    archive.write(np.key(), np.value().detach());
  archive.save_to(path);
}

bool compareWithRun(const std::string &dir, const std::vector<LossRow> &rows,
                    torch::nn::Module &model, double rtol) {
  const std::vector<LossRow> ref = readLossCsv(dir + "/loss.csv");
  bool ok = ref.size() == rows.size();
  if (!ok)
    std::fprintf(stderr, "compare: %zu loss rows here, %zu in %s\n", rows.size(), ref.size(),
                 dir.c_str());
  double worstLoss = 0;
  int worstStep = -1;
  for (size_t i = 0; ok && i < rows.size(); ++i) {
    for (auto [a, b] : {std::pair{rows[i].train, ref[i].train}, {rows[i].val, ref[i].val}}) {
      if (a.has_value() != b.has_value()) {
        ok = false;
        std::fprintf(stderr, "compare: step %d is not measured in both runs\n", rows[i].step);
      } else if (a && relative(*a, *b) > worstLoss) {
        worstLoss = relative(*a, *b);
        worstStep = rows[i].step;
      }
    }
  }
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/params.pt");
  double worstParam = 0;
  std::string worstName;
  for (const auto &np : model.named_parameters()) {
    torch::Tensor b;
    archive.read(np.key(), b);
    const double diff = (np.value().detach() - b).norm().item<double>();
    const double r =
        std::isfinite(diff) ? diff / std::max(b.norm().item<double>(), 1e-30) : INFINITY;
    if (r > worstParam) {
      worstParam = r;
      worstName = np.key();
    }
  }
  std::printf("compare with %s: largest relative difference: loss %.3g (step %d), "
              "param %.3g (%s); tolerance %.3g\n",
              dir.c_str(), worstLoss, worstStep, worstParam, worstName.c_str(), rtol);
  return ok && worstLoss <= rtol && worstParam <= rtol;
}

} // namespace gpt
