// The step-time simulator (sim/): the collective cost model, the
// cluster parser's refusals, the engine on hand-timed programs, and the
// memory trace against the plan's own peak figure.
#include "sim/Simulate.h"
#include "CompileSupport.h"
#include "sim/Cluster.h"
#include "sim/CostModel.h"
#include "sim/Engine.h"
#include "sim/Memory.h"
#include "sim/Pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace dmuon;
using namespace dmuon::sim;

namespace {

Cluster unitCluster(bool coalesced) {
  Cluster c;
  c.devicesPerNode = 8;
  c.coalesced = coalesced;
  c.device.memoryBandwidth = 1e9;
  c.device.matmulFlops[static_cast<int>(MatmulDType::bf16)] = 1e12;
  c.intra.present = true;
  for (LinkCost &l : c.intra.kinds)
    l = {1e9, 1e-3};
  return c;
}

TEST(SimulateCostModel, RingAndTreeFormulas) {
  Cluster c = unitCluster(true);
  // all-reduce of 8 ranks: 2*7 latency steps, 2*7/8 of the bytes per link.
  EXPECT_DOUBLE_EQ(transferSeconds(c, {CollKind::AllReduce, 8, 8e9, false, 1}), 14e-3 + 14.0);
  // broadcast: ceil(log2 5) = 3 steps, every byte once.
  EXPECT_DOUBLE_EQ(transferSeconds(c, {CollKind::Broadcast, 5, 1e9, false, 1}), 3e-3 + 1.0);
  EXPECT_DOUBLE_EQ(transferSeconds(c, {CollKind::AllGather, 4, 4e9, false, 1}), 3e-3 + 3.0);
  // One rank, or nothing to move: free.
  EXPECT_EQ(transferSeconds(c, {CollKind::AllReduce, 1, 1e9, false, 1}), 0);
  EXPECT_EQ(transferSeconds(c, {CollKind::AllReduce, 4, 0, false, 1}), 0);
}

TEST(SimulateCostModel, CoalescingPaysOneLatency) {
  CommOp op;
  op.parts = {{CollKind::Broadcast, 2, 1e9, false, 10}, {CollKind::Reduce, 2, 1e9, false, 1}};
  EXPECT_DOUBLE_EQ(opSeconds(unitCluster(true), op), 2.0 + 1e-3);
  EXPECT_DOUBLE_EQ(opSeconds(unitCluster(false), op), 2.0 + 11e-3);
}

// The calibration's fit inverts the cost model: samples priced by
// transferSeconds give back the link's latency and bandwidth.
TEST(SimulateCostModel, FitRecoversTheLink) {
  Cluster c = unitCluster(true);
  for (LinkCost &l : c.intra.kinds)
    l = {2.5e9, 7e-6};
  for (CollKind kind : {CollKind::Broadcast, CollKind::AllReduce, CollKind::ReduceScatter}) {
    std::vector<CollSample> samples;
    for (double b = 1024; b <= 16e6; b *= 4)
      samples.push_back({b, transferSeconds(c, {kind, 4, b, false, 1})});
    std::optional<LinkCost> fit = fitLinkCost(kind, 4, samples);
    ASSERT_TRUE(fit.has_value()) << collKindKey(kind);
    EXPECT_NEAR(fit->bandwidth, 2.5e9, 2.5e9 * 1e-9) << collKindKey(kind);
    EXPECT_NEAR(fit->latency, 7e-6, 7e-6 * 1e-6) << collKindKey(kind);
  }
  // Times that fall with the size, one size, or one rank: no link.
  EXPECT_FALSE(fitLinkCost(CollKind::AllReduce, 2, {{1e3, 2e-3}, {1e6, 1e-3}}));
  EXPECT_FALSE(fitLinkCost(CollKind::AllReduce, 2, {{1e3, 2e-3}, {1e3, 2e-3}}));
  EXPECT_FALSE(fitLinkCost(CollKind::AllReduce, 1, {{1e3, 1e-3}, {1e6, 2e-3}}));
  // A negative intercept (noise) is zero latency, the slope refitted.
  std::optional<LinkCost> l = fitLinkCost(CollKind::Broadcast, 2, {{1e3, 1e-7}, {1e6, 1e-3}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->latency, 0);
  EXPECT_GT(l->bandwidth, 0);
}

TEST(SimulateCluster, ByteSizes) {
  EXPECT_EQ(parseByteSize("80GiB"), 80.0 * 1073741824.0);
  EXPECT_EQ(parseByteSize(" 141 GB "), 141e9);
  EXPECT_EQ(parseByteSize("1.5e3"), 1500.0);
  EXPECT_FALSE(parseByteSize("-1GiB"));
  EXPECT_FALSE(parseByteSize("80 GiBs"));
  EXPECT_FALSE(parseByteSize("GiB"));
  EXPECT_FALSE(parseByteSize("1e400"));
}

bool parses(const std::string &text, std::string &errors, Cluster &c) {
  llvm::raw_string_ostream os(errors);
  Diagnostics diags("dmuon-plan", os);
  bool ok = parseCluster(text, "c.toml", diags, c);
  os.flush();
  return ok;
}

const char *kGood = "[cluster]\ndevices_per_node = 4\n[device]\nmemory = \"16GiB\"\n"
                    "memory_bandwidth = 1e11\nns_dtype = \"f32\"\n[device.matmul_flops]\n"
                    "f32 = 1e12\n[network.intra]\nbandwidth = 1e10\nlatency = 1e-6\n"
                    "[network.intra.broadcast]\nbandwidth = 2e10\n";

TEST(SimulateCluster, ParsesAndOverridesPerKind) {
  std::string errors;
  Cluster c;
  ASSERT_TRUE(parses(kGood, errors, c)) << errors;
  EXPECT_EQ(c.devicesPerNode, 4);
  EXPECT_EQ(c.device.memoryBytes, 16.0 * 1073741824.0);
  EXPECT_EQ(c.device.nsFlops(), 1e12);
  EXPECT_EQ(c.intra.cost(CollKind::Broadcast).bandwidth, 2e10);
  EXPECT_EQ(c.intra.cost(CollKind::AllReduce).bandwidth, 1e10);
  EXPECT_EQ(c.intra.cost(CollKind::Broadcast).latency, 1e-6);
  EXPECT_FALSE(c.inter.present);
  EXPECT_EQ(c.workload.kind, Workload::Kind::None);
}

TEST(SimulateCluster, RefusesBadNumbersWithLocations) {
  struct Case {
    std::string edit, from, to, expect;
  };
  const Case cases[] = {
      {"", "latency = 1e-6", "latency = -1e-6",
       "c.toml:11:11: error: 'latency' in [network.intra]"},
      {"", "bandwidth = 1e10", "bandwidth = nan",
       "must be a number from 1e6 to 1e15 (bytes per second), not nan"},
      {"", "f32 = 1e12", "f32 = \"fast\"", "c.toml:8:7: error: 'f32' in [device.matmul_flops]"},
      {"", "devices_per_node = 4", "devices_per_node = 4.5", "c.toml:2:20: error"},
      {"", "memory = \"16GiB\"", "memory = true", "'memory' in [device] must be a size"},
  };
  for (const Case &k : cases) {
    std::string text = kGood;
    text.replace(text.find(k.from), k.from.size(), k.to);
    std::string errors;
    Cluster c;
    EXPECT_FALSE(parses(text, errors, c)) << k.to;
    EXPECT_TRUE(unittest::contains(errors, k.expect)) << k.to << "\n" << errors;
  }
  std::string errors;
  Cluster c;
  EXPECT_FALSE(
      parses(std::string(kGood) + "[workload]\nforward_seconds = 1\nmfu = 0.5\n", errors, c));
  EXPECT_TRUE(unittest::contains(errors, "gives both seconds")) << errors;
}

// One group: forward 1 s, backward 2 s, a 1 s broadcast and a 1 s reduce on
// one network; Z3.
Program oneGroup() {
  Program p;
  GroupWork g;
  g.name = "g";
  g.forward = 1;
  g.backward = 2;
  g.unshard = {Stream::Unshard, {{CollKind::Broadcast, 2, 1e9, false, 1}}};
  g.phase1 = {Stream::Reduce, {{CollKind::Reduce, 2, 1e9, false, 1}}};
  p.groups.push_back(g);
  StepItem ns;
  ns.label = "ns";
  ns.seconds = 0.5;
  p.step.push_back(ns);
  p.nsSeconds = 0.5;
  return p;
}

TEST(SimulateEngine, OneGroupTimeline) {
  Cluster c = unitCluster(true);
  for (LinkCost &l : c.intra.kinds)
    l.latency = 0;
  RankRun run = runProgram(c, oneGroup(), nullptr, true);
  // broadcast 0-1, forward 1-2, broadcast again 2-3, backward 3-5, reduce
  // 5-6 (waited for in the step), NS 6-6.5.
  EXPECT_DOUBLE_EQ(run.times.total, 6.5);
  EXPECT_DOUBLE_EQ(run.times.compute, 3);
  EXPECT_DOUBLE_EQ(run.times.exposed, 2);
  EXPECT_DOUBLE_EQ(run.times.optimizer, 1.5);
  ASSERT_EQ(run.timeline.size(), 6u);
  EXPECT_EQ(run.timeline[3].what, "backward g");
  EXPECT_DOUBLE_EQ(run.timeline[3].begin, 3);
  // Z2 keeps the buffer for backward: one broadcast fewer.
  Program z2 = oneGroup();
  z2.z3 = false;
  EXPECT_DOUBLE_EQ(runProgram(c, z2, nullptr, false).times.total, 5.5);
}

// oversubscribed_latency is charged per unit of oversubscription: nothing
// up to a processor per rank, the figure itself at twice as many ranks.
TEST(SimulateCluster, OversubscribedWaitScalesWithRanksPerProcessor) {
  Cluster c = unitCluster(false);
  c.oversubscribedLatency = 1e-3;
  EXPECT_EQ(oversubscribedWait(c, 4), 0); // no processors_per_node: no time-sharing
  c.processorsPerNode = 2;
  EXPECT_EQ(oversubscribedWait(c, 2), 0);
  EXPECT_DOUBLE_EQ(oversubscribedWait(c, 3), 0.5e-3);
  EXPECT_DOUBLE_EQ(oversubscribedWait(c, 4), 1e-3);
  EXPECT_DOUBLE_EQ(oversubscribedWait(c, 8), 3e-3);
  EXPECT_DOUBLE_EQ(oversubscribedWait(c, 64), 3e-3); // 8 ranks per node
}

// The wait is paid once per collective, at the first wait on it: Z3's
// backward re-broadcast is a new collective, Z2's kept buffer is not.
TEST(SimulateEngine, OversubscribedWaitOncePerCollective) {
  Cluster c = unitCluster(true);
  for (LinkCost &l : c.intra.kinds)
    l.latency = 0;
  Program p = oneGroup();
  p.collectiveWait = 0.25;
  // OneGroupTimeline's 6.5 s, plus the two broadcasts' waits in the hooks
  // and the reduce's in the step.
  RankRun run = runProgram(c, p, nullptr, false);
  EXPECT_DOUBLE_EQ(run.times.total, 7.25);
  EXPECT_DOUBLE_EQ(run.times.exposed, 2.5);
  EXPECT_DOUBLE_EQ(run.times.optimizer, 1.75);
  p.z3 = false; // 5.5 s, one broadcast and the reduce waited
  EXPECT_DOUBLE_EQ(runProgram(c, p, nullptr, false).times.total, 6.0);
}

TEST(SimulateEngine, BoundsDelayCouplingCollectives) {
  Cluster c = unitCluster(true);
  Program p = oneGroup();
  StepItem ar;
  ar.kind = StepItem::Kind::Comm;
  ar.label = "norm";
  ar.global = true;
  ar.comm = {Stream::Reduce, {{CollKind::AllReduce, 2, 0, false, 1}}};
  p.step.insert(p.step.begin(), ar);
  RankRun alone = runProgram(c, p, nullptr, false);
  ASSERT_EQ(alone.arrivals.global.size(), size_t(kSimulatedSteps));
  Bounds late = alone.arrivals;
  for (double &t : late.global.back())
    t += 10; // in the measured step, another rank reaches the all-reduce 10 s later
  // An empty collective costs nothing and waits for nobody; give it bytes.
  p.step[0].comm.parts[0].bytes = 1;
  RankRun bounded = runProgram(c, p, &late, false);
  EXPECT_GT(bounded.times.optimizer, alone.times.optimizer + 9);
}

TEST(SimulateMemory, TraceMatchesThePlansPeak) {
  const std::string manifest = "[[param]]\nrepeat = 4\nprefix = \"layers.{i}.\"\n"
                               "  [[param.param]]\n  name = \"a.weight\"\n  shape = [256, 512]\n"
                               "  [[param.param]]\n  name = \"norm.weight\"\n  shape = [256]\n";
  for (const char *mesh : {"2", "2x2", "4"})
    for (Mode mode : {Mode::z3, Mode::z2}) {
      PlanModel model;
      model.options.mode = mode;
      std::string errors;
      ASSERT_TRUE(unittest::compile(manifest, mesh, model, errors)) << errors;
      std::vector<uint8_t> buf = writePlan(model);
      const plan::Plan &p = *plan::GetPlan(buf.data());
      MemoryReport m = checkMemory(p, 1e12);
      EXPECT_TRUE(m.traceMatches) << mesh;
      EXPECT_GE(m.peak.group, 0) << mesh;
      EXPECT_EQ(m.ranksOver, 0);
      EXPECT_EQ(checkMemory(p, 1).ranksOver, int64_t(p.mesh()->world_size()));
    }
}

// The parser's ranges keep a description's figures finite; a cluster built
// in code has no such guard, and what the simulator would print from it must
// still be a number or an error, never "inf" or "-nan".
TEST(SimulateResults, FiguresThatOverflowAreRefusedNotPrinted) {
  const std::string manifest = "[[param]]\nname = \"layers.0.a.weight\"\nshape = [256, 512]\n";
  PlanModel model;
  std::string errors;
  ASSERT_TRUE(unittest::compile(manifest, "2", model, errors)) << errors;
  std::vector<uint8_t> buf = writePlan(model);
  const plan::Plan &p = *plan::GetPlan(buf.data());

  Cluster c = unitCluster(true);
  c.device.memoryBytes = 1e12;
  c.workload.kind = Workload::Kind::Seconds;
  c.workload.forwardSeconds = 1e-3;
  c.workload.backwardSeconds = 2e-3;
  Simulation ok;
  std::string error;
  ASSERT_TRUE(simulate(p, c, "unit", ok, error)) << error;
  EXPECT_TRUE(std::isfinite(ok.dmuon.times.total));

  Cluster forward = c;
  forward.workload.forwardSeconds = INFINITY;
  Simulation out;
  EXPECT_FALSE(simulate(p, forward, "unit", out, error));
  EXPECT_NE(error.find("forward of hook group 'layers.0' is not finite (inf)"), std::string::npos)
      << error;

  Cluster slowNs = c;
  slowNs.device.matmulFlops[static_cast<int>(MatmulDType::bf16)] = 1e-320;
  error.clear();
  EXPECT_FALSE(simulate(p, slowNs, "unit", out, error));
  EXPECT_NE(error.find("is not finite"), std::string::npos) << error;
  EXPECT_NE(error.find("overflow the cost model"), std::string::npos) << error;
}

// The worst step of a refresh period is the costliest step of it: against
// every step of the period tried in turn, for frequencies whose gcd is not
// 1 (so not every pair of phases meets) and for one rule alone.
TEST(SimulateRefreshes, WorstStepIsTheCostliestOfThePeriod) {
  for (RefreshPeriod period : {RefreshPeriod{6, 4}, RefreshPeriod{5, 0}, RefreshPeriod{0, 3}}) {
    std::vector<Refresh> refreshes;
    for (int64_t k = 0; k < 7; ++k) {
      const bool soap = period.shampoo == 0 || (period.soap > 0 && k % 2 == 0);
      const int64_t f = soap ? period.soap : period.shampoo;
      refreshes.push_back({soap, (k * 5 + 1) % f, 1.0 + static_cast<double>((k * 7) % 4)});
    }
    double most = 0;
    for (int64_t step = 0; step < period.steps(); ++step)
      most = std::max(most, refreshSecondsAt(refreshes, period, step));
    const auto [step, seconds] = worstRefreshStep(refreshes, period);
    EXPECT_DOUBLE_EQ(seconds, most) << period.soap << " " << period.shampoo;
    EXPECT_GE(step, 0);
    EXPECT_LT(step, period.steps());
    EXPECT_DOUBLE_EQ(refreshSecondsAt(refreshes, period, step), most) << step;
    double sum = 0;
    for (int64_t t = 0; t < period.steps(); ++t)
      sum += refreshSecondsAt(refreshes, period, t);
    EXPECT_DOUBLE_EQ(amortizedRefreshSeconds(refreshes, period), sum / period.steps());
  }
}

// SOAP's and Shampoo's refreshes at their phases: the mean step is the same
// whatever the phases (each refresh amortized), the worst step is longer
// than the mean, and longest where every matrix refreshes on the same step
// (--stagger-refreshes=false). A Muon-only plan has neither.
TEST(SimulateRefreshes, StaggeredPhasesShortenTheWorstStep) {
  const std::string manifest =
      "[[param]]\nrepeat = 4\nprefix = \"layers.{i}.\"\n"
      "  [[param.param]]\n  name = \"soap.weight\"\n  shape = [128, 128]\n"
      "  optimizer = \"soap\"\n"
      "  [[param.param]]\n  name = \"shampoo.weight\"\n  shape = [128, 128]\n"
      "  optimizer = \"shampoo\"\n";
  Cluster c = unitCluster(true);
  c.device.memoryBytes = 1e12;
  c.workload.kind = Workload::Kind::Seconds;
  c.workload.forwardSeconds = 1e-3;
  c.workload.backwardSeconds = 2e-3;
  std::vector<Simulation> sims;
  for (bool stagger : {true, false}) {
    PlanModel model;
    model.options.smallParamThreshold = 0;
    model.options.optimizer.soapPreconditionFrequency = 4;
    model.options.optimizer.shampooPreconditionFrequency = 3;
    model.options.optimizer.staggerRefreshes = stagger;
    std::string errors;
    ASSERT_TRUE(unittest::compile(manifest, "2", model, errors)) << errors;
    std::vector<uint8_t> buf = writePlan(model);
    const plan::Plan &p = *plan::GetPlan(buf.data());
    Simulation out;
    std::string error;
    ASSERT_TRUE(simulate(p, c, "unit", out, error)) << error;
    EXPECT_EQ(out.refreshes.soap, 4);
    EXPECT_EQ(out.refreshes.shampoo, 3);
    EXPECT_EQ(out.refreshes.steps(), 12);
    EXPECT_GT(out.dmuonWorst.times.optimizer, out.dmuon.times.optimizer) << stagger;
    EXPECT_GE(out.dmuonWorst.times.total, out.dmuon.times.total) << stagger;
    sims.push_back(std::move(out));
  }
  const Simulation &staggered = sims[0], &flat = sims[1];
  EXPECT_NEAR(staggered.dmuon.times.total, flat.dmuon.times.total, 1e-12 * flat.dmuon.times.total);
  EXPECT_GT(flat.dmuonWorst.times.total, staggered.dmuonWorst.times.total);
  // Every matrix at phase 0: SOAP's refreshes at steps 0 mod 4 and Shampoo's
  // at steps 2 mod 3 (its steps count from 1) meet at step 8 of the 12.
  EXPECT_EQ(flat.worstStep, 8);

  const std::string muonOnly = "[[param]]\nname = \"layers.0.a.weight\"\nshape = [256, 512]\n";
  PlanModel model;
  std::string errors;
  ASSERT_TRUE(unittest::compile(muonOnly, "2", model, errors)) << errors;
  std::vector<uint8_t> buf = writePlan(model);
  Simulation out;
  std::string error;
  ASSERT_TRUE(simulate(*plan::GetPlan(buf.data()), c, "unit", out, error)) << error;
  EXPECT_FALSE(out.refreshes.any());
  EXPECT_EQ(printSimulationText(out).find("worst"), std::string::npos);
  EXPECT_EQ(printSimulationJson(out).find("worst"), std::string::npos);
}

// P equal stages over M micro-batches without sends: the schedule takes
// (M + P - 1) micro-batch forward+backward times under either schedule, the
// bubble is (P - 1) / (M + P - 1) of it, and they differ in the activations
// held: GPipe every micro-batch's on every stage, 1F1B at most P - k on stage k.
TEST(SimulatePipeline, EqualStagesBubbleIsTheFormula) {
  for (PipelineSchedule sched : {PipelineSchedule::OneFOneB, PipelineSchedule::GPipe})
    for (int64_t P : {1, 2, 4, 8})
      for (int64_t M : {1, 3, 8, 32}) {
        const std::vector<StageCost> stages(static_cast<size_t>(P), StageCost{1, 2, 0});
        const ScheduleRun run = runSchedule(sched, M, stages);
        const double p = static_cast<double>(P), m = static_cast<double>(M);
        EXPECT_DOUBLE_EQ(run.makespan, (m + p - 1) * 3) << P << " " << M;
        EXPECT_NEAR(run.bubble, (p - 1) / (m + p - 1), 1e-12) << P << " " << M;
        EXPECT_DOUBLE_EQ(run.end[0], run.makespan); // the first stage's backward is last
        for (int64_t k = 0; k < P; ++k)
          EXPECT_EQ(run.inFlight[static_cast<size_t>(k)],
                    sched == PipelineSchedule::GPipe ? M : std::min(M, P - k))
              << P << " " << M << " " << k;
      }
}

// Each op order holds every micro-batch's forward before its backward, once.
TEST(SimulatePipeline, OrdersRunEveryMicroBatchOnce) {
  for (PipelineSchedule sched : {PipelineSchedule::OneFOneB, PipelineSchedule::GPipe})
    for (int64_t k = 0; k < 4; ++k) {
      const std::vector<int64_t> order = scheduleOrder(sched, 4, k, 6);
      ASSERT_EQ(order.size(), 12u);
      std::vector<int> seen(6, 0);
      for (int64_t op : order) {
        const size_t i = static_cast<size_t>(op >= 0 ? op : -1 - op);
        EXPECT_EQ(seen[i], op >= 0 ? 0 : 1) << k << " " << op;
        ++seen[i];
      }
    }
}

// A send delays the next stage's forward and the previous stage's backward:
// GPipe's critical path crosses P - 1 boundaries each way.
TEST(SimulatePipeline, SendsLengthenTheCriticalPath) {
  const std::vector<StageCost> stages(4, StageCost{1, 2, 0.5});
  const ScheduleRun run = runSchedule(PipelineSchedule::GPipe, 8, stages);
  EXPECT_DOUBLE_EQ(run.makespan, (8 + 4 - 1) * 3 + 2 * 3 * 0.5);
}

// A pipeline is as slow as its slowest stage: a stage of twice the compute
// sets the schedule (at least M of its micro-batches) and the bubble is
// measured against it; the step waits for every stage's backward and hooks,
// then takes the slowest stage's optimizer step.
TEST(SimulatePipeline, SlowestStageSetsTheStep) {
  std::vector<StageCost> costs(4, StageCost{1, 2, 0});
  costs[2] = {2, 4, 0};
  for (PipelineSchedule sched : {PipelineSchedule::OneFOneB, PipelineSchedule::GPipe}) {
    const ScheduleRun run = runSchedule(sched, 8, costs);
    // Its 8 x 6, after the first micro-batch's forwards on stages 0 and 1,
    // before the last one's backwards there.
    EXPECT_GE(run.makespan, 2 * 1 + 8 * 6 + 2 * 2) << pipelineScheduleName(sched);
    EXPECT_NEAR(run.bubble, 1 - 8 * 6 / run.makespan, 1e-12);
    const ScheduleRun equal = runSchedule(sched, 8, std::vector<StageCost>(4, {1, 2, 0}));
    EXPECT_GT(run.makespan, equal.makespan + 8 * 2);
  }
  std::vector<SchemeResult> perStage(4);
  const double exposed[] = {0, 0, 0, 20}, optimizer[] = {1, 5, 2, 1};
  for (size_t k = 0; k < 4; ++k) {
    perStage[k].rank = static_cast<int64_t>(10 * k);
    perStage[k].times.exposed = exposed[k];
    perStage[k].times.optimizer = optimizer[k];
  }
  PipelineReport report;
  const SchemeResult step = pipelinedStep(perStage, costs, PipelineSchedule::OneFOneB, 8, &report);
  const ScheduleRun run = runSchedule(PipelineSchedule::OneFOneB, 8, costs);
  // The last stage ends its backwards first but waits 20 in its hooks.
  EXPECT_LT(run.end[3] + 20, run.end[0] + 20);
  EXPECT_DOUBLE_EQ(report.flush, std::max(run.end[0], run.end[3] + 20));
  EXPECT_DOUBLE_EQ(step.times.total, report.flush + 5);
  EXPECT_EQ(step.rank, 30); // the stage whose own end, hooks and step are longest
  ASSERT_EQ(report.rows.size(), 4u);
  EXPECT_EQ(report.rows[3].inFlight, 1);
  EXPECT_DOUBLE_EQ(report.rows[0].end, run.end[0]);
}

// A plan with stages: each rank's program holds its stage's layers, the
// stages' compute sums to P times a rank's workload (each pipeline carries
// its P stages' ranks' tokens), every stage has its ranks, and the step is
// the flush plus the slowest optimizer step. A plan without stages has no
// pipeline and prints none.
TEST(SimulatePipeline, PlanWithStagesRunsTheSchedule) {
  const std::string manifest = "[[param]]\nrepeat = 4\nprefix = \"layers.{i}.\"\n"
                               "  [[param.param]]\n  name = \"a.weight\"\n  shape = [256, 256]\n";
  Cluster c = unitCluster(true);
  c.device.memoryBytes = 1e12;
  c.workload.kind = Workload::Kind::Seconds;
  c.workload.forwardSeconds = 1e-3;
  c.workload.backwardSeconds = 2e-3;
  c.pipeline.microBatches = 4;
  PlanModel model;
  std::string errors;
  ASSERT_TRUE(unittest::compile(manifest, "pp=2,dp_shard=2", model, errors)) << errors;
  std::vector<uint8_t> buf = writePlan(model);
  Simulation out;
  std::string error;
  ASSERT_TRUE(simulate(*plan::GetPlan(buf.data()), c, "unit", out, error)) << error;
  const PipelineReport &pr = out.pipeline;
  ASSERT_EQ(pr.stages, 2);
  ASSERT_EQ(pr.rows.size(), 2u);
  double compute = 0, optimizer = 0;
  for (const StageRow &row : pr.rows) {
    EXPECT_EQ(row.ranks, 2);
    compute += 4 * (row.cost.forward + row.cost.backward);
    optimizer = std::max(optimizer, row.times.optimizer);
    EXPECT_NEAR(row.times.compute, 4 * (row.cost.forward + row.cost.backward), 1e-15);
  }
  EXPECT_NEAR(compute, 2 * 3e-3, 1e-15);
  EXPECT_GE(pr.flush, pr.makespan);
  EXPECT_DOUBLE_EQ(out.dmuon.times.total, pr.flush + optimizer);
  EXPECT_NE(printSimulationText(out).find("pipeline: 2 stages, 1f1b, 4 micro-batches"),
            std::string::npos);

  PlanModel flat;
  ASSERT_TRUE(unittest::compile(manifest, "4", flat, errors)) << errors;
  buf = writePlan(flat);
  Simulation one;
  ASSERT_TRUE(simulate(*plan::GetPlan(buf.data()), c, "unit", one, error)) << error;
  EXPECT_EQ(one.pipeline.stages, 1);
  EXPECT_EQ(printSimulationText(one).find("pipeline"), std::string::npos);
  EXPECT_EQ(printSimulationJson(one).find("pipeline"), std::string::npos);
}

// On a plan with stages a rank refreshes (and orthogonalizes) only its own
// stage's matrices: the owner coordinates off the stage dim match on every
// stage, the stage coordinate tells them apart.
TEST(SimulatePipeline, RanksRefreshOnlyTheirStagesMatrices) {
  const std::string manifest = "[[param]]\nrepeat = 4\nprefix = \"layers.{i}.\"\n"
                               "  [[param.param]]\n  name = \"soap.weight\"\n  shape = [128, 128]\n"
                               "  optimizer = \"soap\"\n";
  PlanModel model;
  model.options.smallParamThreshold = 0;
  std::string errors;
  ASSERT_TRUE(unittest::compile(manifest, "pp=2,dp_shard=2", model, errors)) << errors;
  std::vector<uint8_t> buf = writePlan(model);
  const plan::Plan &p = *plan::GetPlan(buf.data());
  Cluster c = unitCluster(true);
  const MeshView mesh = MeshView::of(p, c.devicesPerNode);
  ASSERT_EQ(mesh.P, 2);
  size_t refreshes = 0;
  for (int64_t r = 0; r < mesh.world; ++r)
    refreshes += rankRefreshes(p, mesh, c, r).size();
  EXPECT_EQ(refreshes, 4u); // each of the 4 matrices on its one owner
}

} // namespace
