// dmuon-calibrate: measures this machine as the simulator's cost model sees
// it (docs/cluster-format.md, "Calibration") and writes a cluster
// description for it:
//   * each collective kind the model prices (broadcast, reduce, all-reduce,
//     all-gather, reduce-scatter), issued as the runtime's MPI backend
//     issues it (runtime/backends/mpi), over buffer sizes from 1 KiB up;
//     the latency and bus bandwidth are fitted (fitLinkCost);
//   * the optimizer's element-wise kernels (kernels/cpu: the Muon momentum
//     and update, AdamW) on every rank at once, as memory bandwidth at the
//     bytes per element the model charges;
//   * Newton-Schulz per matrix shape (the shapes of a plan's Muon params, or
//     --shapes), written as a cost table (the CSV dmuonc's --cost-table
//     reads) and fitted as one fp32 flops rate;
//   * run with more ranks on a node than it has processors, the wait each
//     collective costs ranks that time-share them (oversubscribed_latency):
//     the figures above are then measured on the node's first `processors`
//     ranks, as the simulator scales them itself.
// Every figure is the best of --repeats runs (fewer for the kernels and the
// largest buffers), each the slowest rank's time.
//
//   mpirun -n 2 dmuon-calibrate --plan gpt.plan -o cpu.toml --ns-table cpu-ns.csv
#include "CalibrateFlags.h"
#include "sim/CostModel.h"

#include "dmuon/plan_generated.h"
#include "kernels/NsForms.h"
#include "kernels/cpu/MuonKernels.h"
#include "plan/ReadFile.h"
#include "plan/verify/PlanVerifier.h"
#include "support/Diagnostics.h"
#include "support/OutputFile.h"

#include "llvm/Support/raw_ostream.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

using dmuon::calibrate::Flags;
using dmuon::sim::CollKind;
using dmuon::sim::CollSample;
namespace k = dmuon::kernels;

// The best over `repeats` of the slowest rank's seconds of `body`, all
// ranks starting together.
double bestOf(int repeats, MPI_Comm comm, const std::function<void()> &body) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    body();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    best = std::min(best, slowest);
  }
  return best;
}

// One collective of `bytes` of buffer (Transfer::bytes' meaning), issued
// and waited for as the MPI backend does.
void runCollective(CollKind kind, int64_t bytes, int world, std::vector<float> &a,
                   std::vector<float> &b, MPI_Comm comm) {
  const int count = static_cast<int>(bytes / 4);
  const int per = count / world;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Request r;
  switch (kind) {
  case CollKind::Broadcast:
    MPI_Ibcast(a.data(), count * 4, MPI_BYTE, 0, comm, &r);
    break;
  case CollKind::Reduce:
    if (rank == 0)
      MPI_Ireduce(MPI_IN_PLACE, a.data(), count, MPI_FLOAT, MPI_SUM, 0, comm, &r);
    else
      MPI_Ireduce(a.data(), nullptr, count, MPI_FLOAT, MPI_SUM, 0, comm, &r);
    break;
  case CollKind::AllReduce:
    MPI_Iallreduce(MPI_IN_PLACE, a.data(), count, MPI_FLOAT, MPI_SUM, comm, &r);
    break;
  case CollKind::AllGather:
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, a.data(), per * 4, MPI_BYTE, comm, &r);
    break;
  case CollKind::ReduceScatter:
    MPI_Ireduce_scatter_block(a.data(), b.data(), per, MPI_FLOAT, MPI_SUM, comm, &r);
    break;
  }
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

struct KindFit {
  CollKind kind;
  dmuon::sim::LinkCost cost;
  std::vector<CollSample> samples;
};

std::vector<KindFit> measureCollectives(const Flags &f, MPI_Comm comm, std::string &err) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  std::vector<float> a(static_cast<size_t>(f.maxBytes / 4) + 1, 1.0f), b(a.size());
  std::vector<KindFit> fits;
  for (CollKind kind : {CollKind::Broadcast, CollKind::Reduce, CollKind::AllReduce,
                        CollKind::AllGather, CollKind::ReduceScatter}) {
    KindFit fit{kind, {}, {}};
    for (int64_t bytes = 1024; bytes <= f.maxBytes; bytes *= 4) {
      // Whole floats on every rank (all-gather, reduce-scatter).
      const int64_t B = bytes / (4 * world) * 4 * world;
      if (B == 0)
        continue;
      runCollective(kind, B, world, a, b, comm); // warm the path
      // Large buffers vary less and cost more: fewer runs.
      const int reps = std::max(3, B >= (int64_t(4) << 20) ? f.repeats / 3 : f.repeats);
      const double t = bestOf(reps, comm, [&] { runCollective(kind, B, world, a, b, comm); });
      fit.samples.push_back({static_cast<double>(B), t});
    }
    std::optional<dmuon::sim::LinkCost> c = dmuon::sim::fitLinkCost(kind, world, fit.samples);
    if (!c) {
      err = std::string("the ") + dmuon::sim::collKindKey(kind) +
            " times do not fit latency + bytes / bandwidth (see the samples with -o -)";
      return {};
    }
    fit.cost = *c;
    fits.push_back(std::move(fit));
  }
  return fits;
}

// Element-wise bandwidth at the bytes per element the cost model charges
// (docs/cluster-format.md): 20 for the Muon momentum + update, 28 for AdamW.
struct Elementwise {
  double muon = 0, adamw = 0;
};

Elementwise measureElementwise(const Flags &f, MPI_Comm comm) {
  const int64_t n = int64_t(4) << 20; // 16 MiB per array: past the caches
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f), u(n);
  k::MuonHyper mh;
  k::AdamWHyper ah;
  const int reps = std::max(3, f.repeats / 2);
  const double muon = bestOf(reps, comm, [&] {
    k::muonMomentum(m.data(), g.data(), u.data(), n, mh);
    k::muonApply(p.data(), u.data(), n, 1024, n / 1024, mh);
  });
  int64_t step = 0;
  const double adam = bestOf(reps, comm, [&] {
    k::adamwStep(p.data(), m.data(), v.data(), g.data(), n, ++step, ah);
  });
  return {20.0 * static_cast<double>(n) / muon, 28.0 * static_cast<double>(n) / adam};
}

// The NS shapes of a plan's Muon params: the full matrix of a comm param
// (NS runs gathered), else the local one.
bool planShapes(const std::string &path, Flags &f, std::string &err) {
  std::vector<uint8_t> bytes;
  err = dmuon::planfile::readFile(path, bytes);
  if (err.empty())
    err = dmuon::planfile::verifyPlan(bytes.data(), bytes.size(), false);
  if (!err.empty()) {
    err = path + ": " + err;
    return false;
  }
  const dmuon::plan::Plan *p = dmuon::plan::GetPlan(bytes.data());
  if (p->options() && p->options()->optimizer())
    f.nsSteps = p->options()->optimizer()->ns_steps();
  std::set<std::pair<int64_t, int64_t>> seen;
  if (p->params())
    for (const dmuon::plan::Param *q : *p->params()) {
      if (q->role() != dmuon::plan::Role::muon)
        continue;
      const bool comm = q->gather_mesh_dim() >= 0;
      const int64_t r = comm || q->local_rows() <= 0 ? q->rows() : q->local_rows();
      const int64_t c = comm || q->local_cols() <= 0 ? q->cols() : q->local_cols();
      if (seen.insert({r, c}).second)
        f.shapes.emplace_back(r, c);
    }
  return true;
}

struct NsFit {
  std::vector<double> seconds; // per f.shapes
  double flopsRate = 0;        // fp32 flops/s over every shape
};

NsFit measureNs(const Flags &f, MPI_Comm comm) {
  NsFit out;
  double flops = 0, seconds = 0;
  k::NsWorkspace ws;
  for (const auto &shape : f.shapes) {
    // Plain variables: clang 14 cannot capture structured bindings.
    const int64_t rows = shape.first, cols = shape.second;
    std::vector<float> in(static_cast<size_t>(rows * cols)), res(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    auto ns = [&] {
      k::newtonSchulz(in.data(), res.data(), rows, cols, f.nsSteps, k::NsCoefficients::Original,
                      ws, k::NsForm::Auto);
    };
    ns(); // grow the workspace
    const double t = bestOf(std::max(3, f.repeats / 2), comm, ns);
    out.seconds.push_back(t);
    flops += k::ns::flops(k::NsForm::Auto, rows, cols, f.nsSteps);
    seconds += t;
  }
  out.flopsRate = seconds > 0 ? flops / seconds : 0;
  return out;
}

// Waits for every rank of `comm` asleep, not in MPI's polling wait: ranks
// idle while others measure must leave the processors to them (a look
// every millisecond, against measurements of seconds).
void meetAsleep(MPI_Comm comm) {
  MPI_Request r;
  MPI_Ibarrier(comm, &r);
  for (int done = 0; MPI_Test(&r, &done, MPI_STATUS_IGNORE), !done;)
    usleep(1000);
}

// The mean seconds of one small all-reduce (one float, issued and waited
// for as the MPI backend does) in a run of `batch` back to back: the best
// of `repeats` runs, each the slowest rank's. Once the ranks time-share
// processors, a rank's wait lasts until its peers are scheduled; a mean over
// many collectives prices that wait as the step meets it, one per collective.
double smallAllReduceSeconds(int repeats, int batch, MPI_Comm comm) {
  float x = 1, y = 0;
  return bestOf(repeats, comm, [&] {
           for (int i = 0; i < batch; ++i) {
             MPI_Request r;
             MPI_Iallreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, comm, &r);
             MPI_Wait(&r, MPI_STATUS_IGNORE);
           }
         }) /
         batch;
}

// oversubscribed_latency (docs/cluster-format.md, "Oversubscribed
// processors"): the small all-reduce on all `nodeRanks` ranks of each node
// against on the first `processors` (the others asleep), the difference per
// unit of oversubscription (ranks / processors - 1), as the simulator
// charges it.
struct Oversubscription {
  double seconds = 0, few = 0, all = 0;
};

Oversubscription measureOversubscription(const Flags &f, MPI_Comm comm, MPI_Comm firstP,
                                         bool inFirstP, int nodeRanks, int64_t processors) {
  constexpr int kBatch = 20;
  Oversubscription o;
  if (inFirstP)
    o.few = smallAllReduceSeconds(f.repeats, kBatch, firstP);
  meetAsleep(comm);
  o.all = smallAllReduceSeconds(f.repeats, kBatch, comm);
  const double factor = static_cast<double>(nodeRanks) / static_cast<double>(processors) - 1;
  o.seconds = std::max(0.0, (o.all - o.few) / factor);
  return o;
}

std::string utcNow() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::string fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// --max-bytes' cap (docs/cluster-format.md, "Calibration").
constexpr int64_t kMaxCollectiveBytes = int64_t(1) << 30;

// The bytes a rank allocates to measure with `f`: the collectives' two
// buffers of --max-bytes, the element-wise kernels' five arrays, and each NS
// shape's input, result and workspace. Reports the flag and value whose
// bytes overflow, pass the cap or pass `available` (this node's physical
// memory over its ranks), and returns false.
bool checkMemoryNeeds(const Flags &f, double available, dmuon::Diagnostics &diags) {
  auto tooMuch = [&](const std::string &what, double bytes) {
    diags.error(what + " needs " + fmt("%.4g", bytes) + " bytes per rank, more than the " +
                fmt("%.4g", available) + " this node's memory holds per rank");
    return false;
  };
  if (f.maxBytes > kMaxCollectiveBytes) {
    diags.error("--max-bytes " + std::to_string(f.maxBytes) + " is past the largest buffer " +
                "dmuon-calibrate measures, " + std::to_string(kMaxCollectiveBytes) +
                " (1 GiB: the fit needs no more, and MPI counts are int)");
    return false;
  }
  const double elementwise = 5.0 * 4.0 * static_cast<double>(int64_t(4) << 20);
  const double collectives = 2.0 * static_cast<double>(f.maxBytes);
  if (collectives + elementwise > available)
    return tooMuch("--max-bytes " + std::to_string(f.maxBytes), collectives + elementwise);
  for (const auto &[rows, cols] : f.shapes) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const std::string flag = f.plan.empty() ? "--shapes " + shape : "the --plan shape " + shape;
    int64_t elements = 0;
    // Past 2^40 elements (4 TiB of fp32) no node holds one matrix, and the
    // workspace's own products stay in range below it.
    if (__builtin_mul_overflow(rows, cols, &elements) || elements > (int64_t(1) << 40)) {
      diags.error(flag + " has more than 2^40 elements; no node holds such a matrix");
      return false;
    }
    const double bytes =
        4.0 * (2.0 * static_cast<double>(elements) +
               static_cast<double>(k::nsWorkspaceFloats(rows, cols, k::NsForm::Auto)));
    if (bytes > available)
      return tooMuch(flag, bytes);
  }
  return true;
}

// The outputs may be written: not one file, and neither the plan. Fills in
// the NS shapes (the plan's, or defaults for a cost table).
bool checkRequest(Flags &f, dmuon::Diagnostics &diags) {
  std::string err;
  // Two outputs on one path keep only the second (the cost table, and the
  // description that names it is lost); an output over the plan destroys it.
  if (dmuon::sameFile(f.out, f.nsTable)) {
    diags.error("-o '" + f.out + "' and --ns-table '" + f.nsTable +
                "' are one file; the cost table would replace the description");
    return false;
  }
  if (!dmuon::checkOutputIsNotInput(f.out, {{f.plan, "--plan"}}, diags) ||
      !dmuon::checkOutputIsNotInput(f.nsTable, {{f.plan, "--plan"}}, diags))
    return false;
  if (!f.plan.empty() && !planShapes(f.plan, f, err)) {
    diags.error(err);
    return false;
  }
  if (f.shapes.empty() && !f.nsTable.empty())
    f.shapes = {{256, 256}, {512, 512}, {1024, 1024}};
  return true;
}

// This rank's node: how many ranks share it, this one's index among them,
// its processors and memory.
struct Node {
  int ranks = 1, rank = 0;
  int64_t processors = 0;
  double physicalMemory = 0;
  // Oversubscribed, the network and the kernels are measured on each
  // node's first `processors` ranks, one per processor, the others asleep:
  // the simulator scales compute and adds the wait itself.
  bool oversubscribed() const { return ranks > processors; }
  bool measures() const { return rank < processors; }
};

Node nodeOf(const Flags &f, MPI_Comm comm, int rank) {
  Node n;
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &n.ranks);
  MPI_Comm_rank(node, &n.rank);
  MPI_Comm_free(&node);
  n.physicalMemory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  n.processors =
      f.processors > 0 ? f.processors : static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN));
  return n;
}

// Checked before anything is allocated: a shape or buffer past memory
// would end every rank in std::bad_alloc. Rank 0 reports its node's
// verdict; all ranks follow the worst.
bool fitsInMemory(const Flags &f, const Node &node, MPI_Comm comm, dmuon::Diagnostics &diags) {
  const int fitsHere = checkMemoryNeeds(f, node.physicalMemory / std::max(1, node.ranks), diags);
  int fitsEverywhere = fitsHere;
  MPI_Allreduce(MPI_IN_PLACE, &fitsEverywhere, 1, MPI_INT, MPI_MIN, comm);
  if (!fitsEverywhere && fitsHere)
    diags.error("the measurements need more memory than another node holds per rank");
  return fitsEverywhere;
}

// Every figure the description holds, as rank 0 measured it.
struct Measured {
  int ranks = 0; // the ranks that measured the network and the kernels
  std::vector<KindFit> fits;
  Elementwise ew;
  NsFit ns;
  Oversubscription over;
};

// Measures on every rank of `comm` (collective); false with `err` when the
// collectives could not be fitted.
bool measureAll(const Flags &f, MPI_Comm comm, int rank, int world, const Node &node,
                Measured &m, std::string &err) {
  const bool measuring = node.measures();
  MPI_Comm firstP;
  MPI_Comm_split(comm, measuring ? 0 : 1, rank, &firstP);
  m.ranks = world;
  MPI_Comm_size(firstP, &m.ranks);
  if (!measuring)
    m.ranks = 0;
  MPI_Bcast(&m.ranks, 1, MPI_INT, 0, comm); // rank 0 measures
  int ok = 1;
  if (measuring) {
    if (m.ranks > 1) {
      m.fits = measureCollectives(f, firstP, err);
      ok = !m.fits.empty();
    }
    if (ok) {
      m.ew = measureElementwise(f, firstP);
      m.ns = f.shapes.empty() ? NsFit{} : measureNs(f, firstP);
    }
  }
  meetAsleep(comm);
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) {
    MPI_Comm_free(&firstP);
    return false;
  }
  if (node.oversubscribed())
    m.over = measureOversubscription(f, comm, firstP, measuring, node.ranks, node.processors);
  MPI_Comm_free(&firstP);
  return true;
}

// The description's comment and [cluster] table.
std::string clusterTable(const Flags &f, const Node &node, const Measured &m, int world) {
  const int64_t perNode = f.devicesPerNode > 0 ? f.devicesPerNode : node.ranks;
  std::ostringstream o;
  o << "# Made by dmuon-calibrate on " << world << " rank(s), " << node.ranks
    << " on this node, " << node.processors << " processors, " << utcNow() << ";\n";
  if (node.oversubscribed())
    o << "# the network and the kernels measured on the first " << m.ranks
      << " rank(s), one per processor, the others asleep;\n";
  o << "# every figure the slowest rank's best of " << f.repeats
    << " runs (kernels: half as many; buffers of 4 MiB up: a third)\n"
    << "# (docs/cluster-format.md, \"Calibration\").\n";
  o << "[cluster]\nname = \"" << (f.name.empty() ? "calibrated" : f.name) << "\"\n";
  o << "devices_per_node = " << perNode << "\n";
  o << "processors_per_node = " << node.processors
    << "   # ranks past it time-share the processors\n";
  if (node.oversubscribed())
    o << "oversubscribed_latency = " << fmt("%.4g", m.over.seconds)
      << "   # per wait on a collective at 2x: 1-float all-reduce " << fmt("%.3g", m.over.all)
      << " s on " << node.ranks << " ranks, " << fmt("%.3g", m.over.few) << " s on " << m.ranks
      << "\n";
  else
    o << "# oversubscribed_latency: not measured (run more ranks than processors on a node)\n";
  o << "coalesced_collectives = false   # MPI: one latency per collective\n\n";
  return o.str();
}

// The [device] tables: memory, the element-wise kernels' bandwidth, NS.
std::string deviceTables(const Flags &f, const Node &node, const Measured &m) {
  const double memory = node.physicalMemory / static_cast<double>(std::max(1, node.ranks));
  std::ostringstream o;
  o << "[device]\nmemory = " << fmt("%.0f", memory) << "   # physical memory / ranks on the node\n";
  o << "memory_bandwidth = " << fmt("%.4g", m.ew.muon)
    << "   # Muon momentum + update at 20 B/element\n";
  o << "adamw_bandwidth = " << fmt("%.4g", m.ew.adamw) << "    # AdamW at 28 B/element\n";
  o << "ns_dtype = \"f32\"                # kernels/cpu run NS in fp32\n";
  if (!f.nsTable.empty())
    o << "ns_cost_table = \"" << std::filesystem::path(f.nsTable).filename().string()
      << "\"   # per shape; the rate below prices shapes it lacks\n";
  o << "[device.matmul_flops]\nf32 = " << fmt("%.4g", m.ns.flopsRate > 0 ? m.ns.flopsRate : 1e9)
    << "   # NS flops / NS seconds over " << f.shapes.size() << " shape(s), " << f.nsSteps
    << " iterations\n";
  return o.str();
}

// The [network.intra] tables: each collective kind's fit, with its samples.
std::string networkTables(const Measured &m) {
  std::ostringstream o;
  if (m.ranks > 1) {
    o << "\n[network.intra]                  # MPI between the ranks of this node\n";
    // The all-reduce's figures stand for the network; every kind its own.
    const KindFit &ar = m.fits[2];
    o << "bandwidth = " << fmt("%.4g", ar.cost.bandwidth)
      << "\nlatency = " << fmt("%.4g", ar.cost.latency) << "\n";
    for (const KindFit &kf : m.fits) {
      o << "[network.intra." << dmuon::sim::collKindKey(kf.kind) << "]   # bytes:seconds";
      for (const CollSample &s : kf.samples)
        o << " " << fmt("%.0f", s.bytes) << ":" << fmt("%.3g", s.seconds);
      o << "\nbandwidth = " << fmt("%.4g", kf.cost.bandwidth)
        << "\nlatency = " << fmt("%.4g", kf.cost.latency) << "\n";
    }
  } else {
    o << "\n[network.intra]                  # one rank: nothing measured\n"
         "bandwidth = 1e12\nlatency = 0\n";
  }
  return o.str();
}

// The NS cost table (the CSV dmuonc's --cost-table reads).
std::string nsCostTable(const Flags &f, const NsFit &ns, int world) {
  std::ostringstream t;
  t << "# Newton-Schulz seconds per shape (" << f.nsSteps
    << " iterations, fp32, kernels/cpu), by dmuon-calibrate on " << world << " rank(s), "
    << utcNow() << "\nrows,cols,seconds\n";
  for (size_t i = 0; i < f.shapes.size(); ++i)
    t << f.shapes[i].first << "," << f.shapes[i].second << "," << fmt("%.6g", ns.seconds[i])
      << "\n";
  return t.str();
}

int run(const Flags &fin, MPI_Comm comm, int rank, int world) {
  Flags f = fin;
  // Only rank 0 speaks; every rank reaches the same verdict on the same
  // flags.
  dmuon::Diagnostics diags("dmuon-calibrate", rank == 0 ? llvm::errs() : llvm::nulls());
  if (!checkRequest(f, diags))
    return 1;
  const Node node = nodeOf(f, comm, rank);
  if (!fitsInMemory(f, node, comm, diags))
    return 1;
  Measured m;
  std::string err;
  if (!measureAll(f, comm, rank, world, node, m, err)) {
    diags.error(err);
    return 1;
  }
  if (rank != 0)
    return 0;
  // Each whole or not at all (support/OutputFile.h): a write that fails
  // leaves the previous file as it was.
  const std::string description =
      clusterTable(f, node, m, world) + deviceTables(f, node, m) + networkTables(m);
  if (!dmuon::writeOutputFile(f.out, description, diags))
    return 1;
  if (!f.nsTable.empty() && !dmuon::writeOutputFile(f.nsTable, nsCostTable(f, m.ns, world), diags))
    return 1;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Flags f;
  std::string err;
  int rc = 0;
  if (!dmuon::calibrate::parseFlags(argc, argv, f, err)) {
    if (rank == 0) {
      std::fprintf(stderr, "dmuon-calibrate: error: %s\n", err.c_str());
      dmuon::calibrate::usage(stderr);
    }
    rc = 2;
  } else {
    rc = run(f, MPI_COMM_WORLD, rank, world);
  }
  MPI_Finalize();
  return rc;
}
