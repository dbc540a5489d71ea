// The main() of the MPI test programs written with GoogleTest: every rank
// runs the tests, flags of the form `--name VALUE` fill the given strings
// (all required), and the program fails on every rank when any rank failed.
#ifndef DMUON_TEST_DISTRIBUTED_MPIGTESTMAIN_H
#define DMUON_TEST_DISTRIBUTED_MPIGTESTMAIN_H

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

// `rank` and `world` are set from MPI_COMM_WORLD before the tests run.
inline int runMpiGtest(int argc, char **argv, int &rank, int &world,
                       const std::vector<std::pair<const char *, std::string *>> &flags) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i)
    for (const auto &[name, value] : flags)
      if (std::strcmp(argv[i], name) == 0) {
        *value = argv[++i];
        break;
      }
  for (const auto &[name, value] : flags)
    if (value->empty()) {
      std::string usage;
      for (const auto &[n, v] : flags)
        usage += std::string(" ") + n + " VALUE";
      std::fprintf(stderr, "usage: %s%s\n", argv[0], usage.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && anyFailed)
    std::fprintf(stderr, "a rank failed\n");
  MPI_Finalize();
  return anyFailed;
}

#endif
