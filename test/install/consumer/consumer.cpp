// Loads a plan through the installed C++ wrapper and prints its fingerprint.
#include <dmuon/dmuon.hpp>

#include <cinttypes>
#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_cpp PLAN\n");
    return 2;
  }
  try {
    dmuon::Plan plan(argv[1]);
    int major = 0, minor = 0, patch = 0;
    dmuon_version(&major, &minor, &patch);
    std::printf("libdmuon %d.%d.%d: %s: fingerprint 0x%016" PRIx64 ", %d ranks, %d params\n",
                major, minor, patch, argv[1], plan.fingerprint(), plan.worldSize(),
                plan.numParams());
    // A plan without a pp dim is one stage, 0, on every rank.
    if (plan.numStages() != 1 || plan.rankStage(0) != 0 || plan.paramStage(0) != 0) {
      std::fprintf(stderr, "consumer_cpp: %s: expected one pipeline stage\n", argv[1]);
      return 1;
    }
  } catch (const dmuon::Error &e) {
    std::fprintf(stderr, "consumer_cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
