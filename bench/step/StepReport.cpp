#include "StepReport.h"

#include <cstdio>

namespace step_bench {
namespace {

struct Means {
  double fwdBwd, comm, step, total, slowestTotal; // ms per step
};

Means meansOverRanks(const StepTimes &t, int steps, MPI_Comm comm) {
  const double mine[4] = {t.fwdBwd, t.comm, t.step, t.total()};
  double sum[4] = {0, 0, 0, 0}, max[4] = {0, 0, 0, 0};
  MPI_Allreduce(mine, sum, 4, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(mine, max, 4, MPI_DOUBLE, MPI_MAX, comm);
  int world = 1;
  MPI_Comm_size(comm, &world);
  const double perStep = 1e3 / double(steps);
  const double perRank = perStep / double(world);
  return {sum[0] * perRank, sum[1] * perRank, sum[2] * perRank, sum[3] * perRank,
          max[3] * perStep};
}

} // namespace

void printReport(const std::vector<VariantTimes> &variants, MPI_Comm comm) {
  std::vector<Means> m, fast;
  for (const VariantTimes &v : variants) {
    m.push_back(meansOverRanks(v.sum, v.steps, comm));
    fast.push_back(meansOverRanks(v.fastest, 1, comm));
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank != 0)
    return;
  std::printf("\nms per step, mean over timed steps and ranks (slowest: the slowest rank's "
              "total)\n");
  std::printf("%-34s %9s %9s %9s %9s %9s %7s %11s\n", "variant", "fwd+bwd", "comm", "opt step",
              "total", "slowest", "comm %", "last loss");
  for (size_t i = 0; i < variants.size(); ++i)
    std::printf("%-34s %9.2f %9.2f %9.2f %9.2f %9.2f %6.1f%% %11.6f\n", variants[i].label.c_str(),
                m[i].fwdBwd, m[i].comm, m[i].step, m[i].total, m[i].slowestTotal,
                100.0 * m[i].comm / m[i].total, variants[i].lastLoss);
  std::printf("  comm: dmuon: wall time inside its pre/post forward/backward hooks; baselines: "
              "their blocking Muon-gradient collective after backward\n");
  std::printf("\nms in each rank's fastest timed step, mean over ranks\n");
  std::printf("%-34s %9s %9s %9s %9s\n", "variant", "fwd+bwd", "comm", "opt step", "total");
  for (size_t i = 0; i < variants.size(); ++i)
    std::printf("fastest %-26s %9.2f %9.2f %9.2f %9.2f\n", variants[i].label.c_str(),
                fast[i].fwdBwd, fast[i].comm, fast[i].step, fast[i].total);
  if (variants.size() != 4)
    return;
  const Means &adamw = m[0], &muon = m[1], &allReduce = m[2], &gather = m[3];
  std::printf("ratios:\n");
  std::printf("  muon/dmuon total / adamw/dmuon total            %6.3f\n",
              muon.total / adamw.total);
  std::printf("  muon/dmuon opt step / baseline 1 opt step       %6.3f\n",
              muon.step / allReduce.step);
  std::printf("  muon/dmuon opt step / baseline 2 opt step       %6.3f\n", muon.step / gather.step);
  std::printf("  muon/dmuon total / baseline 1 total             %6.3f\n",
              muon.total / allReduce.total);
  std::printf("  muon/dmuon total / baseline 2 total             %6.3f\n", muon.total / gather.total);
  std::printf("  muon/dmuon share of step blocked in hooks       %5.1f%%\n",
              100.0 * muon.comm / muon.total);
}

} // namespace step_bench
