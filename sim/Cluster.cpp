// The cluster description's parser (docs/cluster-format.md). toml++ gives a
// tree with source positions; every check reports at the key or value it
// concerns, as the manifest frontend does, and all problems of a file are
// reported before it is refused.
#include "sim/Cluster.h"
#include "support/InputFile.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include "support/TomlNodes.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace dmuon::sim {

const char *collKindKey(CollKind k) {
  switch (k) {
  case CollKind::Broadcast:
    return "broadcast";
  case CollKind::Reduce:
    return "reduce";
  case CollKind::AllReduce:
    return "all_reduce";
  case CollKind::AllGather:
    return "all_gather";
  case CollKind::ReduceScatter:
    return "reduce_scatter";
  }
  return "?";
}

const char *pipelineScheduleName(PipelineSchedule s) {
  return s == PipelineSchedule::GPipe ? "gpipe" : "1f1b";
}

double Device::nsSeconds(int64_t rows, int64_t cols, double flops) const {
  if (std::optional<double> t = lookupCost(nsTable, rows, cols))
    return *t;
  return flops / nsFlops();
}

double computeShare(const Cluster &c, int64_t world) {
  const int64_t onNode = std::min(world, c.devicesPerNode);
  if (c.processorsPerNode <= 0 || onNode <= c.processorsPerNode)
    return 1;
  return static_cast<double>(c.processorsPerNode) / static_cast<double>(onNode);
}

double oversubscribedWait(const Cluster &c, int64_t world) {
  const double share = computeShare(c, world);
  return share < 1 ? c.oversubscribedLatency * (1 / share - 1) : 0;
}

Cluster withComputeShare(const Cluster &c, double share) {
  Cluster out = c;
  if (share >= 1)
    return out;
  out.device.memoryBandwidth *= share;
  out.device.adamwMemoryBandwidth *= share;
  for (double &f : out.device.matmulFlops)
    f *= share;
  for (auto &[shape, seconds] : out.device.nsTable)
    seconds /= share;
  out.workload.forwardSeconds /= share;
  out.workload.backwardSeconds /= share;
  return out;
}

namespace {

std::optional<MatmulDType> parseMatmulDType(std::string_view s) {
  if (s == "f32")
    return MatmulDType::f32;
  if (s == "bf16")
    return MatmulDType::bf16;
  if (s == "f16")
    return MatmulDType::f16;
  if (s == "f64")
    return MatmulDType::f64;
  return std::nullopt;
}

const char *const kDTypeKeys[] = {"f32", "bf16", "f16", "f64"};

// The range a figure of the description must lie in (docs/cluster-format.md,
// "Ranges"): wide enough for any machine, narrow enough that a typo or a
// unit slip (1e-300, 1e300, a denormal) is refused here rather than printed
// by the simulator as inf, nan or a 300-digit time. `shown` is the message's.
struct Bounds {
  double lo, hi;
  const char *shown;
};
constexpr Bounds kBandwidth{1e6, 1e15, "a number from 1e6 to 1e15"}; // bytes/s
constexpr Bounds kLatency{0, 10, "a number from 0 to 10"};           // seconds
constexpr Bounds kFlopsRate{1e6, 1e18, "a number from 1e6 to 1e18"}; // flops/s
constexpr Bounds kStepSeconds{0, 86400, "a number from 0 to 86400"}; // a day, as the cost table
constexpr Bounds kTokens{1, 1e9, "a number from 1 to 1e9"};          // per rank and step
constexpr Bounds kFlopsPerToken{1, 1e16, "a number from 1 to 1e16"};
constexpr Bounds kMfu{1e-4, 1, "a number from 0.0001 to 1"}; // a fraction of peak
// 1 byte to 1 PiB.
constexpr double kMaxMemoryBytes = 1125899906842624.0;
constexpr Bounds kMemoryBytes{1, kMaxMemoryBytes, "a number from 1 to 2^50 (1 PiB)"};

class ClusterParser {
public:
  ClusterParser(const std::string &name, Diagnostics &diags, Cluster &out)
      : name_(name), diags_(diags), out_(out) {}

  bool run(std::unique_ptr<llvm::MemoryBuffer> mb);

private:
  llvm::SMLoc locOf(const toml::source_position &pos) const {
    if (pos.line == 0)
      return llvm::SMLoc();
    return diags_.locFor(buffer_, pos.line, pos.column);
  }
  llvm::SMLoc locOf(const toml::node &n) const { return locOf(n.source().begin); }
  llvm::SMLoc locOf(const toml::key &k) const { return locOf(k.source().begin); }
  void error(llvm::SMLoc loc, const llvm::Twine &msg) { diags_.error(loc, msg); }

  // The table at `node`, or an error naming `where`.
  const toml::table *asTable(const toml::node &node, const std::string &where);
  // Reports keys of `t` that are not in `keys`, with a suggestion.
  void checkKeys(const toml::table &t, llvm::ArrayRef<const char *> keys,
                 const std::string &where);
  std::optional<double> number(const toml::table &t, const char *key, const std::string &where,
                               const Bounds &bounds, const char *unit);
  void missing(const toml::table &t, const char *key, const std::string &where);

  void parseClusterTable(const toml::table &t);
  void parseDevice(const toml::table &t);
  void parseNetwork(const toml::table &t);
  void parseLink(const toml::table &t, const std::string &where, Network &net);
  void parseWorkload(const toml::table &t);
  void parsePipeline(const toml::table &t);

  const std::string &name_;
  Diagnostics &diags_;
  Cluster &out_;
  unsigned buffer_ = 0;
};

const toml::table *ClusterParser::asTable(const toml::node &node, const std::string &where) {
  const toml::table *t = node.as_table();
  if (!t)
    error(locOf(node), where + " must be a table, not " + tomlTypeName(node));
  return t;
}

void ClusterParser::checkKeys(const toml::table &t, llvm::ArrayRef<const char *> keys,
                              const std::string &where) {
  for (auto &&[k, v] : t) {
    llvm::StringRef key(k.str());
    if (llvm::is_contained(keys, key))
      continue;
    error(locOf(k), "unknown key '" + key.str() + "' in " + where + didYouMean(key, keys));
  }
}

void ClusterParser::missing(const toml::table &t, const char *key, const std::string &where) {
  error(locOf(t), where + " has no '" + key + "'");
}

std::optional<double> ClusterParser::number(const toml::table &t, const char *key,
                                            const std::string &where, const Bounds &bounds,
                                            const char *unit) {
  const toml::node *n = t.get(key);
  if (!n)
    return std::nullopt;
  std::optional<double> v;
  if (const auto *i = n->as_integer())
    v = static_cast<double>(i->get());
  else if (const auto *f = n->as_floating_point())
    v = f->get();
  if (!v) {
    error(locOf(*n), "'" + llvm::Twine(key) + "' in " + where + " must be " + bounds.shown + " (" +
                         unit + "), not " + tomlTypeName(*n));
    return std::nullopt;
  }
  // NaN fails both comparisons.
  if (!(*v >= bounds.lo && *v <= bounds.hi)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *v);
    std::string shown = n->is_integer() ? std::to_string(n->as_integer()->get()) : buf;
    error(locOf(*n), "'" + llvm::Twine(key) + "' in " + where + " must be " + bounds.shown + " (" +
                         unit + "), not " + shown);
    return std::nullopt;
  }
  return v;
}

void ClusterParser::parseClusterTable(const toml::table &t) {
  const std::string where = "[cluster]";
  checkKeys(t, {"name", "devices_per_node", "coalesced_collectives", "processors_per_node",
                "oversubscribed_latency"},
            where);
  if (auto v = number(t, "oversubscribed_latency", where, kLatency, "seconds")) {
    out_.oversubscribedLatency = *v;
    // Without processors the ranks never time-share: a figure that would
    // silently do nothing is a mistake in the description.
    if (!t.get("processors_per_node"))
      error(locOf(*t.get("oversubscribed_latency")),
            "'oversubscribed_latency' in [cluster] needs 'processors_per_node' (the ranks "
            "past it wait for each other)");
  }
  if (const toml::node *n = t.get("processors_per_node")) {
    const auto *i = n->as_integer();
    if (!i || i->get() < 1 || i->get() > (int64_t(1) << 24))
      error(locOf(*n), "'processors_per_node' in [cluster] must be an integer from 1 to 16777216");
    else
      out_.processorsPerNode = i->get();
  }
  if (const toml::node *n = t.get("name")) {
    if (const auto *s = n->as_string())
      out_.name = s->get();
    else
      error(locOf(*n), "'name' in [cluster] must be a string, not " + llvm::Twine(tomlTypeName(*n)));
  }
  if (const toml::node *n = t.get("devices_per_node")) {
    const auto *i = n->as_integer();
    if (!i || i->get() < 1 || i->get() > (int64_t(1) << 24))
      error(locOf(*n), "'devices_per_node' in [cluster] must be an integer from 1 to 16777216");
    else
      out_.devicesPerNode = i->get();
  } else {
    missing(t, "devices_per_node", where);
  }
  if (const toml::node *n = t.get("coalesced_collectives")) {
    if (const auto *b = n->as_boolean())
      out_.coalesced = b->get();
    else
      error(locOf(*n), "'coalesced_collectives' in [cluster] must be true or false, not " +
                           llvm::Twine(tomlTypeName(*n)));
  }
}

void ClusterParser::parseDevice(const toml::table &t) {
  const std::string where = "[device]";
  checkKeys(t, {"memory", "memory_bandwidth", "adamw_bandwidth", "matmul_flops", "ns_dtype",
                "ns_cost_table"},
            where);
  if (auto v = number(t, "adamw_bandwidth", where, kBandwidth, "bytes per second"))
    out_.device.adamwMemoryBandwidth = *v;
  if (const toml::node *n = t.get("ns_cost_table")) {
    // Relative to the description, so that a profile and its table travel
    // together; read by the parser of dmuonc's --cost-table.
    if (const auto *s = n->as_string()) {
      std::filesystem::path tp(s->get());
      if (tp.is_relative())
        tp = std::filesystem::path(name_).parent_path() / tp;
      out_.device.nsTablePath = tp.string();
      const unsigned before = diags_.errorCount();
      if (!loadCostTable(out_.device.nsTablePath, diags_, out_.device.nsTable) &&
          diags_.errorCount() == before)
        error(locOf(*n), "cannot read the cost table '" + out_.device.nsTablePath + "'");
    } else {
      error(locOf(*n), "'ns_cost_table' in [device] must be a path (a string), not " +
                           llvm::Twine(tomlTypeName(*n)));
    }
  }
  if (const toml::node *n = t.get("memory")) {
    std::optional<double> bytes;
    if (const auto *s = n->as_string())
      bytes = parseByteSize(s->get());
    else if (n->is_integer() || n->is_floating_point())
      bytes = number(t, "memory", where, kMemoryBytes, "bytes");
    else
      error(locOf(*n), "'memory' in [device] must be a size ('80GiB') or a number of bytes, "
                       "not " + llvm::Twine(tomlTypeName(*n)));
    if (n->is_string() && (!bytes || *bytes <= 0))
      error(locOf(*n), "'memory' in [device] must be a positive size such as '80GiB' or "
                       "'141GB' (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), not '" +
                           n->as_string()->get() + "'");
    else if (n->is_string() && !(*bytes >= 1 && *bytes <= kMaxMemoryBytes))
      error(locOf(*n), "'memory' in [device] must be a size from 1B to 1024TiB (1 PiB), not '" +
                           n->as_string()->get() + "'");
    else if (bytes)
      out_.device.memoryBytes = *bytes;
  } else {
    missing(t, "memory", where);
  }
  if (auto v = number(t, "memory_bandwidth", where, kBandwidth, "bytes per second"))
    out_.device.memoryBandwidth = *v;
  else if (!t.get("memory_bandwidth"))
    missing(t, "memory_bandwidth", where);

  const toml::node *nsNode = t.get("ns_dtype");
  if (nsNode) {
    const auto *s = nsNode->as_string();
    std::optional<MatmulDType> d = s ? parseMatmulDType(s->get()) : std::nullopt;
    if (!d)
      error(locOf(*nsNode), "'ns_dtype' in [device] must be one of f32, bf16, f16, f64");
    else
      out_.device.nsDType = *d;
  }
  const toml::node *flops = t.get("matmul_flops");
  if (!flops) {
    missing(t, "matmul_flops", where);
    return;
  }
  const toml::table *ft = asTable(*flops, "'matmul_flops' in [device]");
  if (!ft)
    return;
  const std::string fwhere = "[device.matmul_flops]";
  checkKeys(*ft, kDTypeKeys, fwhere);
  for (int d = 0; d < kNumMatmulDTypes; ++d)
    if (auto v = number(*ft, kDTypeKeys[d], fwhere, kFlopsRate, "flops per second"))
      out_.device.matmulFlops[d] = *v;
  const char *ns = kDTypeKeys[static_cast<int>(out_.device.nsDType)];
  if (!ft->get(ns))
    error(locOf(*ft), fwhere + " gives no throughput for " + ns + ", the dtype Newton-Schulz "
                                                                 "runs in (ns_dtype)");
}

void ClusterParser::parseLink(const toml::table &t, const std::string &where, Network &net) {
  static const char *const keys[] = {"bandwidth",  "latency",    "broadcast",     "reduce",
                                     "all_reduce", "all_gather", "reduce_scatter"};
  checkKeys(t, keys, where);
  net.present = true;
  std::optional<double> bw = number(t, "bandwidth", where, kBandwidth, "bytes per second");
  std::optional<double> lat = number(t, "latency", where, kLatency, "seconds");
  for (int k = 0; k < kNumCollKinds; ++k) {
    const char *kind = collKindKey(static_cast<CollKind>(k));
    std::optional<double> kbw = bw, klat = lat;
    const toml::node *sub = t.get(kind);
    const std::string kwhere = "[" + where.substr(1, where.size() - 2) + "." + kind + "]";
    if (sub) {
      if (const toml::table *st = asTable(*sub, "'" + std::string(kind) + "' in " + where)) {
        checkKeys(*st, {"bandwidth", "latency"}, kwhere);
        if (st->get("bandwidth"))
          kbw = number(*st, "bandwidth", kwhere, kBandwidth, "bytes per second");
        if (st->get("latency"))
          klat = number(*st, "latency", kwhere, kLatency, "seconds");
      }
    }
    // A kind without its own figure takes the link's; report each figure
    // missing from both once, at the link's table.
    if (!kbw && !t.get("bandwidth") && !(sub && sub->is_table() && sub->as_table()->get("bandwidth")))
      error(locOf(t), where + " gives no bandwidth for " + kind +
                          " (set 'bandwidth' for every kind, or in " + kwhere + ")");
    if (!klat && !t.get("latency") && !(sub && sub->is_table() && sub->as_table()->get("latency")))
      error(locOf(t), where + " gives no latency for " + kind + " (set 'latency' for every "
                                                               "kind, or in " + kwhere + ")");
    net.kinds[k] = {kbw.value_or(0), klat.value_or(0)};
  }
}

void ClusterParser::parseNetwork(const toml::table &t) {
  checkKeys(t, {"intra", "inter"}, "[network]");
  if (const toml::node *n = t.get("intra")) {
    if (const toml::table *it = asTable(*n, "'intra' in [network]"))
      parseLink(*it, "[network.intra]", out_.intra);
  } else {
    error(locOf(t), "[network] has no 'intra' table (the network inside a node)");
  }
  if (const toml::node *n = t.get("inter"))
    if (const toml::table *it = asTable(*n, "'inter' in [network]"))
      parseLink(*it, "[network.inter]", out_.inter);
}

void ClusterParser::parseWorkload(const toml::table &t) {
  const std::string where = "[workload]";
  checkKeys(t, {"forward_seconds", "backward_seconds", "tokens_per_rank", "flops_per_token",
                "mfu", "compute_dtype"},
            where);
  Workload &w = out_.workload;
  const bool bySeconds = t.get("forward_seconds") || t.get("backward_seconds");
  const bool byFlops = t.get("tokens_per_rank") || t.get("flops_per_token") || t.get("mfu") ||
                       t.get("compute_dtype");
  if (bySeconds && byFlops) {
    error(locOf(t), "[workload] gives both seconds (forward_seconds, backward_seconds) and a "
                    "flops model (tokens_per_rank, mfu, ...); give one");
    return;
  }
  if (bySeconds) {
    w.kind = Workload::Kind::Seconds;
    for (const char *key : {"forward_seconds", "backward_seconds"}) {
      std::optional<double> v = number(t, key, where, kStepSeconds, "seconds");
      if (!t.get(key))
        missing(t, key, where);
      (std::string_view(key) == "forward_seconds" ? w.forwardSeconds : w.backwardSeconds) =
          v.value_or(0);
    }
    return;
  }
  if (!byFlops)
    return; // an empty [workload]: no forward/backward compute
  w.kind = Workload::Kind::Flops;
  if (auto v = number(t, "tokens_per_rank", where, kTokens, "tokens"))
    w.tokensPerRank = *v;
  else if (!t.get("tokens_per_rank"))
    missing(t, "tokens_per_rank", where);
  if (auto v = number(t, "mfu", where, kMfu, "a fraction of peak"))
    w.mfu = *v;
  else if (!t.get("mfu"))
    missing(t, "mfu", where);
  if (t.get("flops_per_token"))
    w.flopsPerToken = number(t, "flops_per_token", where, kFlopsPerToken, "flops").value_or(0);
  if (const toml::node *n = t.get("compute_dtype")) {
    const auto *s = n->as_string();
    std::optional<MatmulDType> d = s ? parseMatmulDType(s->get()) : std::nullopt;
    if (!d)
      error(locOf(*n), "'compute_dtype' in [workload] must be one of f32, bf16, f16, f64");
    else
      w.computeDType = *d;
  }
  if (out_.device.matmulFlops[static_cast<int>(w.computeDType)] <= 0)
    error(locOf(t), "[workload] computes in " +
                        llvm::Twine(kDTypeKeys[static_cast<int>(w.computeDType)]) +
                        " (compute_dtype), for which [device.matmul_flops] gives no throughput");
}

void ClusterParser::parsePipeline(const toml::table &t) {
  const std::string where = "[pipeline]";
  checkKeys(t, {"schedule", "micro_batches", "hidden_size"}, where);
  PipelineConfig &pc = out_.pipeline;
  if (const toml::node *n = t.get("schedule")) {
    const auto *s = n->as_string();
    if (s && s->get() == "1f1b")
      pc.schedule = PipelineSchedule::OneFOneB;
    else if (s && s->get() == "gpipe")
      pc.schedule = PipelineSchedule::GPipe;
    else
      error(locOf(*n), "'schedule' in [pipeline] must be \"1f1b\" or \"gpipe\"");
  }
  const struct {
    const char *key;
    int64_t max, *into;
  } ints[] = {{"micro_batches", kMaxMicroBatches, &pc.microBatches},
              {"hidden_size", kMaxHiddenSize, &pc.hiddenSize}};
  for (const auto &[key, max, into] : ints)
    if (const toml::node *n = t.get(key)) {
      const auto *i = n->as_integer();
      if (!i || i->get() < 1 || i->get() > max)
        error(locOf(*n), "'" + llvm::Twine(key) + "' in [pipeline] must be an integer from 1 to " +
                             std::to_string(max));
      else
        *into = i->get();
    }
}

// No key of a cluster needs more than three dots; a few kilobytes can hold
// one of thousands of parts, which toml++ would recurse into.
constexpr unsigned kMaxKeyDots = 64;

bool ClusterParser::run(std::unique_ptr<llvm::MemoryBuffer> mb) {
  const unsigned before = diags_.errorCount();
  std::string_view text(mb->getBufferStart(), mb->getBufferSize());
  buffer_ = diags_.addBuffer(std::move(mb));
  if (!checkTomlKeyDepth(text, buffer_, diags_, kMaxKeyDots))
    return false;
  toml::table root;
  if (!parseTomlLocated(
          text, name_, diags_, [&](const toml::source_position &p) { return locOf(p); }, root))
    return false;
  checkKeys(root, {"cluster", "device", "network", "workload", "pipeline"},
            "the cluster description");
  const toml::table *tables[4] = {};
  const char *names[4] = {"cluster", "device", "network", "workload"};
  for (int i = 0; i < 4; ++i)
    if (const toml::node *n = root.get(names[i]))
      tables[i] = asTable(*n, "'" + std::string(names[i]) + "'");
    else if (i < 3 && diags_.errorCount() == before)
      diags_.error(diags_.locFor(buffer_, 1, 1),
                   "the cluster description has no [" + llvm::Twine(names[i]) + "] table");
  if (tables[0])
    parseClusterTable(*tables[0]);
  if (tables[1])
    parseDevice(*tables[1]);
  if (tables[2])
    parseNetwork(*tables[2]);
  if (tables[3] && tables[1])
    parseWorkload(*tables[3]);
  if (const toml::node *n = root.get("pipeline"))
    if (const toml::table *t = asTable(*n, "'pipeline'"))
      parsePipeline(*t);
  return diags_.errorCount() == before;
}

} // namespace

bool parseCluster(std::string_view text, const std::string &name, Diagnostics &diags,
                  Cluster &out) {
  ClusterParser p(name, diags, out);
  return p.run(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text.data(), text.size()), name));
}

bool loadCluster(const std::string &path, Diagnostics &diags, Cluster &out) {
  std::unique_ptr<llvm::MemoryBuffer> mb =
      readInputFile(path, diags, kMaxClusterBytes, "a cluster description");
  if (!mb)
    return false;
  if (mb->getBufferIdentifier() != path)
    mb = llvm::MemoryBuffer::getMemBufferCopy(mb->getBuffer(), path);
  ClusterParser p(path, diags, out);
  return p.run(std::move(mb));
}

} // namespace dmuon::sim
