#include "CalibrateFlags.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace dmuon::calibrate {

void usage(FILE *f) {
  std::fprintf(f, R"(usage: mpirun -n N dmuon-calibrate [options]

Measures MPI collectives, the optimizer's element-wise kernels and
Newton-Schulz on this machine and writes a cluster description
(docs/cluster-format.md). Run it with the ranks per node you train with.

  -o FILE            the description (default: stdout)
  --ns-table FILE    also time NS per shape and write FILE as a cost table
                     (rows,cols,seconds), named by the description
  --plan PLAN        the NS shapes: every Muon param's of the plan
  --shapes RxC,...   the NS shapes, given (default with --ns-table and no
                     --plan: 256x256,512x512,1024x1024)
  --ns-steps K       NS iterations (default 5; a plan's own with --plan)
  --repeats N        runs of each measurement; the best is kept (default 10)
  --max-bytes B      largest collective buffer (default 16777216)
  --devices-per-node N   (default: the ranks sharing this node's memory)
  --processors N     processors per node (default: the OS's count); with
                     more ranks on a node, measures oversubscribed_latency
  --name TEXT        [cluster] name
)");
}

namespace {

bool parseShapes(const std::string &text, std::vector<std::pair<int64_t, int64_t>> &out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    long long r = 0, c = 0;
    char x = 0, extra = 0;
    if (std::sscanf(item.c_str(), "%lld%c%lld%c", &r, &x, &c, &extra) != 3 || x != 'x' || r <= 0 ||
        c <= 0)
      return false;
    out.emplace_back(r, c);
  }
  return !out.empty();
}

} // namespace

bool parseFlags(int argc, char **argv, Flags &f, std::string &err) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      err = "missing value or unknown option: " + a;
      return false;
    }
    const std::string v = argv[++i];
    auto positive = [&](int64_t &dst) {
      char *end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || x <= 0) {
        err = "bad value for " + a + ": " + v;
        return false;
      }
      dst = x;
      return true;
    };
    int64_t n = 0;
    if (a == "-o")
      f.out = v;
    else if (a == "--ns-table")
      f.nsTable = v;
    else if (a == "--plan")
      f.plan = v;
    else if (a == "--name")
      f.name = v;
    else if (a == "--shapes") {
      if (!parseShapes(v, f.shapes)) {
        err = "--shapes must be RxC[,RxC...] with positive sizes, not " + v;
        return false;
      }
    } else if (a == "--repeats" || a == "--ns-steps") {
      if (!positive(n))
        return false;
      (a == "--repeats" ? f.repeats : f.nsSteps) = static_cast<int>(std::min<int64_t>(n, 1000));
    } else if (a == "--max-bytes") {
      if (!positive(f.maxBytes))
        return false;
    } else if (a == "--devices-per-node") {
      if (!positive(f.devicesPerNode))
        return false;
    } else if (a == "--processors") {
      if (!positive(f.processors))
        return false;
    } else {
      err = "unknown option: " + a;
      return false;
    }
  }
  return true;
}

} // namespace dmuon::calibrate
