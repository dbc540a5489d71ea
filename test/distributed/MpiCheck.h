// Failure reporting shared by the MPI test programs: every rank counts its
// failures and prints the first few; rank 0 prints progress; the program
// passes when no rank failed.
#ifndef DMUON_TEST_DISTRIBUTED_MPICHECK_H
#define DMUON_TEST_DISTRIBUTED_MPICHECK_H

#include <mpi.h>

#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <exception>
#include <string>

namespace mpicheck {

inline int gRank = 0, gWorld = 1;

// The bits of `f`, for bit-identical comparisons.
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline int gFailures = 0;
inline int gPrinted = 0;

// Sets gRank and gWorld from MPI_COMM_WORLD (after MPI_Init).
inline void init() {
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gWorld);
}

inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char *fmt, ...) {
  ++gFailures;
  if (gPrinted++ >= 40) {
    if (gPrinted == 42)
      std::fprintf(stderr, "rank %d: (further failures not printed)\n", gRank);
    return;
  }
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rank %d: FAIL: %s\n", gRank, buf);
  std::fflush(stderr);
}

inline void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void info(const char *fmt, ...) {
  if (gRank != 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
  std::fflush(stdout);
}

// Failures anywhere so far, summed over all ranks.
inline int globalFailures() {
  int sum = 0;
  MPI_Allreduce(&gFailures, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

// The P of `--plan P` on the command line; "" (after printing `usage` on
// rank 0) when there is none.
inline std::string planArgument(int argc, char **argv, const char *usage) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--plan")
      return argv[i + 1];
  if (gRank == 0)
    std::fprintf(stderr, "usage: %s\n", usage);
  return {};
}

// main() of an MPI test program: runs `tests` (returning 2 for a usage error),
// turns an exception into an abort (one rank's exception would leave the
// others in a collective), and exits 1 when any rank failed.
inline int runMain(int argc, char **argv, int (*tests)(int, char **)) {
  MPI_Init(&argc, &argv);
  init();
  int rc = 0;
  try {
    rc = tests(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rank %d: FAIL: exception: %s\n", gRank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (rc == 2) {
    MPI_Finalize();
    return 2;
  }
  const int failures = globalFailures();
  if (gRank == 0)
    std::printf("%s: %d failure(s) over %d ranks\n", failures ? "FAILED" : "PASSED", failures,
                gWorld);
  MPI_Finalize();
  return failures ? 1 : rc;
}

} // namespace mpicheck

#endif
