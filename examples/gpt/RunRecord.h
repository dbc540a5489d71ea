// What a dmuon-gpt run leaves behind (--out DIR) and how two runs compare:
// loss.csv (step, train loss, validation loss, seconds) and params.pt (the
// final params, a torch::serialize archive keyed by param name).
#ifndef DMUON_EXAMPLES_GPT_RUNRECORD_H
#define DMUON_EXAMPLES_GPT_RUNRECORD_H

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace gpt {

struct LossRow {
  int step = 0;
  double train = NAN; // the loss of step `step`'s batch, before its update
  double val = NAN;   // after `step` updates, where evaluated
  double seconds = NAN; // wall time of the step
};

void writeLossCsv(const std::string &path, const std::vector<LossRow> &rows);
std::vector<LossRow> readLossCsv(const std::string &path);

void saveParams(const std::string &path, torch::nn::Module &model);

// Compares this run with a reference run's directory: every step's train
// and validation loss, and every final param by ||a - b|| / ||b||, each
// within rtol. Prints the largest deviations; returns whether all passed.
bool compareWithRun(const std::string &dir, const std::vector<LossRow> &rows,
                    torch::nn::Module &model, double rtol);

} // namespace gpt

#endif
