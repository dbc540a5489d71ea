// What a dmuon-gpt run leaves behind (--out DIR) and how two runs compare:
// loss.csv (step, train loss, validation loss, seconds) and params.pt (the
// final params, a torch::serialize archive keyed by param name).
#ifndef DMUON_EXAMPLES_GPT_RUNRECORD_H
#define DMUON_EXAMPLES_GPT_RUNRECORD_H

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace gpt {

// Empty where not measured; a diverged run shows as a non-finite value.
struct LossRow {
  int step = 0;
  std::optional<double> train;   // the loss of step `step`'s batch, before its update
  std::optional<double> val;     // after `step` updates, where evaluated
  std::optional<double> seconds; // wall time of the step
};

void writeLossCsv(const std::string &path, const std::vector<LossRow> &rows);
std::vector<LossRow> readLossCsv(const std::string &path);

void saveParams(const std::string &path, torch::nn::Module &model);

// Compares this run with a reference run's directory: every step's train
// and validation loss, and every final param by ||a - b|| / ||b||, each
// within rtol (a non-finite value never is). Prints the largest deviations;
// returns whether all passed.
bool compareWithRun(const std::string &dir, const std::vector<LossRow> &rows,
                    torch::nn::Module &model, double rtol);

} // namespace gpt

#endif
