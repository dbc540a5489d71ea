// partition_quality: the partition-quality table and compile times of
// docs/partition.md. For every bundled model and slot count it prints max/LB
// (LB = the strongest lower bound dmuonc proves, passes/LowerBound.cpp) for
//   rr       round-robin of the specification's units in model order,
//   layer    per-layer LPT (each layer balanced on its own, loads added),
//   lpt      plain global LPT of the specification's units (one merged unit
//            of small params per layer, strict layer rule, no refinement),
//   dmuon    dmuonc's final partition,
// then the time of parse, each pass and emit per model on a 16x256 mesh.
//
//   partition_quality [models-dir]     (default: examples/models)
#include "support/Diagnostics.h"
#include "Frontend.h"
#include "Passes.h"
#include "PlanWriter.h"
#include "passes/Partitioner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace dmuon;

namespace {

const char *kModels[] = {"gpt2-small",    "llama-3.1-8b",      "llama-3.1-70b",
                         "llama-3.1-405b", "qwen3-30b-a3b",    "qwen3-30b-a3b-ep",
                         "deepseek-v3",   "moonlight-16b-a3b", "kimi-k2"};

std::string meshFor(const std::string &model, const std::string &shape) {
  bool ep = model.find("-ep") != std::string::npos;
  std::string m;
  size_t x = shape.find('x');
  if (x == std::string::npos)
    m = "dp_shard=" + shape;
  else
    m = "dp_replicate=" + shape.substr(0, x) + ",dp_shard=" + shape.substr(x + 1);
  return ep ? m + ",ep=8" : m;
}

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Timed {
  std::vector<std::pair<std::string, double>> ms;
};

bool compile(const std::string &path, const std::string &mesh, PlanModel &m, Timed *t) {
  Diagnostics diags("partition_quality");
  auto t0 = Clock::now();
  if (!parseMesh(mesh, m.mesh, diags) || !loadModel(path, InputFormat::Auto, m, diags))
    return false;
  auto t1 = Clock::now();
  if (t)
    t->ms.push_back({"parse", ms(t0, t1)});
  struct P {
    const char *name;
    bool (*run)(PlanModel &, Diagnostics &);
  } passes[] = {{"select", runSelect},     {"validate", runValidate},
                {"group", runGroup},       {"partition", runPartition},
                {"hooks", runHooks},       {"layout", runLayout},
                {"rank-figures", runRankFigures}};
  for (const P &p : passes) {
    auto a = Clock::now();
    if (!p.run(m, diags))
      return false;
    if (t)
      t->ms.push_back({p.name, ms(a, Clock::now())});
  }
  m.stage = Stage::complete;
  auto a = Clock::now();
  std::vector<uint8_t> plan = writePlan(m);
  if (t) {
    t->ms.push_back({"emit", ms(a, Clock::now())});
    t->ms.push_back({"total", ms(t0, Clock::now())});
  }
  return !plan.empty();
}

// The specification's units: a param is its own unit unless small; small
// params of one layer form one unit.
PartitionProblem specUnits(const PlanModel &m, int slots, std::vector<int> &modelOrder) {
  PartitionProblem pb;
  pb.slots = slots;
  std::map<std::string, int> layerId, smallUnit;
  for (const Param &p : m.params) {
    if (p.role != Role::muon)
      continue;
    int layer = layerId.try_emplace(p.layer, static_cast<int>(layerId.size())).first->second;
    if (p.numElements() < m.options.smallParamThreshold) {
      auto [it, inserted] = smallUnit.try_emplace(p.layer, static_cast<int>(pb.cost.size()));
      if (inserted) {
        pb.cost.push_back(0);
        pb.layer.push_back(layer);
        pb.name.push_back(p.layer + ":small");
        modelOrder.push_back(it->second);
      }
      pb.cost[it->second] += p.cost;
    } else {
      modelOrder.push_back(static_cast<int>(pb.cost.size()));
      pb.cost.push_back(p.cost);
      pb.layer.push_back(layer);
      pb.name.push_back(p.name);
    }
  }
  return pb;
}

double roundRobin(const PartitionProblem &pb, const std::vector<int> &order) {
  std::vector<double> load(pb.slots, 0);
  for (size_t i = 0; i < order.size(); ++i)
    load[i % pb.slots] += pb.cost[order[i]];
  return *std::max_element(load.begin(), load.end());
}

double perLayerLpt(const PartitionProblem &pb) {
  std::map<int, std::vector<int>> byLayer;
  for (size_t u = 0; u < pb.cost.size(); ++u)
    byLayer[pb.layer[u]].push_back(static_cast<int>(u));
  std::vector<double> load(pb.slots, 0);
  for (auto &[layer, units] : byLayer) {
    std::sort(units.begin(), units.end(), [&](int a, int b) {
      return pb.cost[a] != pb.cost[b] ? pb.cost[a] > pb.cost[b] : a < b;
    });
    std::set<std::pair<double, int>> local;
    for (int s = 0; s < pb.slots; ++s)
      local.insert({0.0, s});
    std::vector<double> l(pb.slots, 0);
    for (int u : units) {
      int s = local.begin()->second;
      local.erase(local.begin());
      l[s] += pb.cost[u];
      local.insert({l[s], s});
    }
    for (int s = 0; s < pb.slots; ++s)
      load[s] += l[s];
  }
  return *std::max_element(load.begin(), load.end());
}

} // namespace

int main(int argc, char **argv) {
  std::string dir = argc > 1 ? argv[1] : "examples/models";
  const char *shapes[] = {"8", "2x4", "64", "8x8", "256", "16x16", "1024", "4x256", "4096",
                          "16x256"};
  std::printf("max/LB (LB = strongest proven lower bound; kind in brackets); owners = most "
              "owners of one hook group\n");
  std::printf("%-18s %-7s %8s %8s %8s %8s  %-9s %7s\n", "model", "mesh", "rr", "layer", "lpt",
              "dmuon", "LB kind", "owners");
  for (const char *model : kModels) {
    std::string path = dir + "/" + model + ".toml";
    for (const char *shape : shapes) {
      PlanModel m;
      if (!compile(path, meshFor(model, shape), m, nullptr)) {
        std::printf("%-18s %-7s failed\n", model, shape);
        continue;
      }
      const int S = static_cast<int>(m.mesh.numSlots());
      std::vector<int> order;
      PartitionProblem pb = specUnits(m, S, order);
      const double lb = m.stats.lowerBound;
      PartitionResult plain = partitionUnits(pb, {.refine = false});
      std::printf("%-18s %-7s %8.4f %8.4f %8.4f %8.4f  %-9s %7d\n", model, shape,
                  roundRobin(pb, order) / lb, perLayerLpt(pb) / lb, plain.maxLoad / lb,
                  m.stats.maxLoad / lb, m.stats.lowerBoundKind.c_str(),
                  m.stats.maxOwnersPerHookGroup);
    }
  }
  std::printf("\ncompile time in ms on a 16x256 mesh (ep model: 16x256 x ep=8), median of 3\n");
  bool header = false;
  for (const char *model : kModels) {
    std::string path = dir + "/" + model + ".toml";
    std::vector<Timed> runs(3);
    for (Timed &t : runs) {
      PlanModel m;
      compile(path, meshFor(model, "16x256"), m, &t);
    }
    if (!header) {
      std::printf("%-18s", "model");
      for (auto &[name, v] : runs[0].ms)
        std::printf(" %9s", name.c_str());
      std::printf("\n");
      header = true;
    }
    std::printf("%-18s", model);
    for (size_t i = 0; i < runs[0].ms.size(); ++i) {
      std::vector<double> v;
      for (Timed &t : runs)
        v.push_back(i < t.ms.size() ? t.ms[i].second : 0);
      std::sort(v.begin(), v.end());
      std::printf(" %9.1f", v[1]);
    }
    std::printf("\n");
  }
  return 0;
}
