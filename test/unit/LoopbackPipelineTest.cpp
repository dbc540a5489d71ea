// Pipeline stages on the loopback backend (each rank a thread of this
// process): every pipeline mesh, schedule and micro-batching of the tiny
// model (one stage without hook groups too) ends where one rank ends; a rank
// that refuses step() fails its peers with it; another stage's params and
// hooks are refused; and checkpoints resume on another pp.
#include "LoopbackSupport.h"
#include "LoopbackValues.h"
#include "SliceTraining.h"
#include "hosts/tiny/PipelineSchedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>

using namespace dmuon::rt;

std::unique_ptr<LoadedPlan> stagePlan(const std::string &name) {
  return loadPlan(std::string(DMUON_STAGE_PLAN_DIR) + "/tiny-" + name + ".plan");
}

// Binds the params of `rank`'s stage to their step -1 values.
void bindStage(const LoadedPlan &plan, Executor &ex, int rank) {
  const int stage = stageOfRank(plan, rank);
  for (int i = 0; i < plan.numParams(); ++i) {
    if (plan.param(i).pipeline_stage() != stage)
      continue;
    std::vector<float> v(static_cast<size_t>(numel(plan.param(i))));
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = 10 * valueOf(i, -1, static_cast<int64_t>(k));
    ASSERT_TRUE(
        ex.bindParam(plan.param(i).name()->str(), v.data(), static_cast<int64_t>(v.size())).isOk());
  }
}

// One micro-batch of `rank`'s stage's hooks, gradients of 1, without the
// first group's post_backward unless `lastPostBackward`.
// With `bound` false (a stage without hook groups, unbound), no gradient.
void runStageHooks(const LoadedPlan &plan, Executor &ex, int rank, bool lastPostBackward = true,
                   bool bound = true) {
  const int stage = stageOfRank(plan, rank);
  const int groups = plan.root().hook_groups()->size();
  auto onStage = [&](int g) {
    return plan.root().hook_groups()->Get(g)->pipeline_stage() == stage;
  };
  for (int g = 0; g < groups; ++g)
    if (onStage(g)) {
      ASSERT_TRUE(ex.preForward(g).isOk());
      ASSERT_TRUE(ex.postForward(g).isOk());
    }
  for (int i = 0; i < plan.numParams(); ++i)
    if (bound && plan.param(i).pipeline_stage() == stage && plan.param(i).hook_group() < 0) {
      float *grad = nullptr;
      ASSERT_TRUE(ex.gradView(i, &grad).isOk());
      std::fill(grad, grad + numel(plan.param(i)), 1.0f);
    }
  int first = -1;
  for (int g = groups - 1; g >= 0; --g)
    if (onStage(g)) {
      ASSERT_TRUE(ex.preBackward(g).isOk());
      for (int i = 0; i < plan.numParams(); ++i)
        if (plan.param(i).hook_group() == g) {
          float *grad = nullptr;
          ASSERT_TRUE(ex.gradView(i, &grad).isOk());
          std::fill(grad, grad + numel(plan.param(i)), 1.0f);
        }
      first = g;
    }
  for (int g = groups - 1; g >= 0; --g)
    if (onStage(g) && (g != first || lastPostBackward)) {
      ASSERT_TRUE(ex.postBackward(g).isOk());
    }
}

using tiny::Schedule;
using tiny::stageOrder;

// `steps` steps as a pipelined host drives them: every rank binds, hooks and
// feeds gradients to its own stage's params and groups only (the
// activations between stages are the host's). With `microBatches` > 1 the
// step is one runtime micro-batch around the pipeline's: each group's
// pre_forward / post_forward at its first forward, pre_backward at its first
// backward, post_backward after its last, the values viewed at every
// forward (a Z2 plan keeps them unsharded) and each micro-batch adding its
// share of the gradient. Then every param's values from a rank of its
// stage, checked equal on every rank of it.
struct StageRun {
  int steps = 3, firstStep = 0; // the gradients depend on the step's number
  int microBatches = 1;
  Schedule schedule = Schedule::GPipe;
  std::string resumeFrom, saveTo;       // checkpoints loaded after binding, saved after the steps
  std::vector<double> *norms = nullptr; // each rank's last gradient norm
};

std::vector<std::vector<float>> trainStages(const LoadedPlan &plan, const StageRun &run) {
  const int steps = run.steps, microBatches = run.microBatches;
  const Schedule schedule = run.schedule;
  std::vector<double> *norms = run.norms;
  const int n = plan.numParams();
  const int groups = plan.root().hook_groups()->size();
  const int stages = std::max(1, plan.root().mesh()->num_stages());
  if (norms)
    norms->assign(static_cast<size_t>(plan.worldSize()), 0.0);
  std::vector<std::vector<float>> result(static_cast<size_t>(n));
  std::mutex mu;
  runWorld(plan, [&](int rank, Executor &ex) {
    const int stage = Topology::of(plan.root(), rank).stage;
    auto mine = [&](int i) { return plan.param(i).pipeline_stage() == stage; };
    for (int i = 0; i < n; ++i) {
      if (!mine(i))
        continue;
      std::vector<float> v(static_cast<size_t>(numel(plan.param(i))));
      for (size_t k = 0; k < v.size(); ++k)
        v[k] = 10 * valueOf(i, -1, static_cast<int64_t>(k));
      ASSERT_TRUE(
          ex.bindParam(plan.param(i).name()->str(), v.data(), static_cast<int64_t>(v.size()))
              .isOk());
    }
    if (!run.resumeFrom.empty()) {
      Status s = ex.loadCheckpoint(run.resumeFrom, nullptr);
      ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
    }
    // Micro-batch shares of 1/2^k add up to the whole gradient exactly.
    const float share = 1.0f / static_cast<float>(microBatches);
    auto addGradients = [&](int step, int group) {
      for (int i = 0; i < n; ++i) {
        if (!mine(i) || plan.param(i).hook_group() != group)
          continue;
        float *g = nullptr;
        ASSERT_TRUE(ex.gradView(i, &g).isOk());
        for (int64_t k = 0; k < numel(plan.param(i)); ++k)
          g[k] += share * valueOf(i, step, k);
      }
    };
    auto viewValues = [&](int group) {
      for (int i = 0; i < n; ++i)
        if (mine(i) && plan.param(i).hook_group() == group) {
          void *values = nullptr;
          Status s = ex.paramView(i, &values);
          ASSERT_TRUE(s.isOk()) << s.message();
          ASSERT_NE(values, nullptr);
        }
    };
    auto onStage = [&](int g) {
      return plan.root().hook_groups()->Get(g)->pipeline_stage() == stage;
    };
    for (int step = run.firstStep; step < run.firstStep + steps; ++step) {
      for (auto [forward, j] : stageOrder(schedule, stage, stages, microBatches)) {
        if (forward) {
          for (int g = 0; g < groups; ++g)
            if (onStage(g)) {
              if (j == 0) {
                ASSERT_TRUE(ex.preForward(g).isOk());
              }
              viewValues(g);
              if (j == 0) {
                ASSERT_TRUE(ex.postForward(g).isOk());
              }
            }
          continue;
        }
        addGradients(step, -1);
        for (int g = groups - 1; g >= 0; --g)
          if (onStage(g)) {
            if (j == 0) {
              ASSERT_TRUE(ex.preBackward(g).isOk());
            }
            addGradients(step, g);
            if (j == microBatches - 1) {
              ASSERT_TRUE(ex.postBackward(g).isOk());
            }
          }
      }
      Status s = ex.step();
      ASSERT_TRUE(s.isOk()) << "rank " << rank << " step " << step << ": " << s.message();
    }
    // What this rank holds is its stage's share, as the plan counts it. Its
    // buffers too, with one micro-batch per step; a pipeline holds every
    // group's gradient buffer from its first backward to its last, more than
    // the plan's group-at-a-time peak (docs/runtime.md, "Pipeline stages").
    dmuon_memory_report_t held{}, planned{};
    ex.memory(held);
    ex.plannedMemory(planned);
    for (auto field : {&dmuon_memory_report_t::masters, &dmuon_memory_report_t::momentum,
                       &dmuon_memory_report_t::values, &dmuon_memory_report_t::adam_moments,
                       &dmuon_memory_report_t::grads})
      EXPECT_EQ((held.*field).peak, (planned.*field).peak) << "rank " << rank;
    if (microBatches == 1)
      EXPECT_EQ(held.buffers.peak, planned.buffers.peak) << "rank " << rank;
    else
      EXPECT_GE(held.buffers.peak, planned.buffers.peak) << "rank " << rank;
    dmuon_grad_norm_t norm{};
    norm.struct_size = sizeof norm;
    norm.version = DMUON_GRAD_NORM_VERSION;
    ASSERT_TRUE(ex.gradNorm(norm).isOk());
    if (norms)
      (*norms)[static_cast<size_t>(rank)] = norm.total;
    if (!run.saveTo.empty()) {
      Status s = ex.saveCheckpoint(run.saveTo, run.firstStep + steps);
      ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
    }
    for (int i = 0; i < n; ++i) {
      if (!mine(i))
        continue;
      std::vector<float> out(static_cast<size_t>(numel(plan.param(i))));
      Status s =
          ex.gatherParam(plan.param(i).name()->str(), out.data(), static_cast<int64_t>(out.size()));
      ASSERT_TRUE(s.isOk()) << s.message();
      std::lock_guard<std::mutex> lock(mu);
      if (result[static_cast<size_t>(i)].empty())
        result[static_cast<size_t>(i)] = std::move(out);
      else
        EXPECT_EQ(result[static_cast<size_t>(i)], out) << "ranks of stage " << stage << " disagree";
    }
  });
  return result;
}

// Each pipeline mesh trains the tiny model as one rank does, bit for bit
// (owners within each stage), and every rank reports the one global
// gradient norm, each param counted once over every stage.
TEST(Loopback, PipelineStagesEndWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> one = loadPlan(tinyPlan("1"));
  ASSERT_TRUE(one);
  std::vector<double> oneNorm;
  StageRun oneRun;
  oneRun.norms = &oneNorm;
  const std::vector<std::vector<float>> want = trainStages(*one, oneRun);
  ASSERT_GT(oneNorm[0], 0);
  for (int i = 0; i < one->numParams(); ++i)
    ASSERT_NE(want[static_cast<size_t>(i)][0], 10 * valueOf(i, -1, 0)) << "did not train";
  for (const char *mesh : {"pp2", "pp2-shard2", "pp4", "pp2-replicate2"}) {
    std::unique_ptr<LoadedPlan> plan = stagePlan(mesh);
    ASSERT_TRUE(plan);
    ASSERT_GT(plan->root().mesh()->num_stages(), 1);
    std::vector<double> norms;
    StageRun run;
    run.norms = &norms;
    const std::vector<std::vector<float>> got = trainStages(*plan, run);
    ASSERT_EQ(got.size(), want.size());
    for (double norm : norms)
      EXPECT_NEAR(norm, oneNorm[0], 1e-12 * oneNorm[0]) << mesh;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// GPipe and 1F1B hosts: four micro-batches per step, the runtime's hooks
// around them (a Z2 plan: the values stay viewable between a group's first
// forward and its last backward), end bit for bit where one rank ends on
// the whole batch.
TEST(Loopback, PipelineSchedulesEndWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> one = loadPlan(tinyPlan("1"));
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = trainStages(*one, {});
  for (const char *mesh : {"pp4-z2", "pp2-shard2-z2"})
    for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
      std::unique_ptr<LoadedPlan> plan = stagePlan(mesh);
      ASSERT_TRUE(plan);
      StageRun run;
      run.microBatches = 4;
      run.schedule = schedule;
      const std::vector<std::vector<float>> got = trainStages(*plan, run);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << mesh << (schedule == Schedule::GPipe ? " GPipe: " : " 1F1B: ")
                                   << one->param(static_cast<int>(i)).name()->str();
    }
  // 1F1B on stage 0 of 4: three warm-up forwards, then one of each in turn.
  const std::vector<std::pair<bool, int>> order = stageOrder(Schedule::OneFOneB, 0, 4, 4);
  const std::vector<std::pair<bool, int>> expect = {{true, 0},  {true, 1},  {true, 2},  {true, 3},
                                                    {false, 0}, {false, 1}, {false, 2}, {false, 3}};
  EXPECT_EQ(order, expect);
  EXPECT_EQ(stageOrder(Schedule::OneFOneB, 3, 4, 4).front(), std::make_pair(true, 0));
  EXPECT_EQ(stageOrder(Schedule::OneFOneB, 3, 4, 4)[1], std::make_pair(false, 0));
}

// Stages beside tensor parallelism (pipeline-tp.toml): each stage's tp group
// gathers its sharded matrices for NS, every rank binding and feeding its
// own slice of its own stage's params; 10 steps end bit for bit where one
// rank ends.
TEST(Loopback, PipelineWithTensorParallelEndsWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> one =
      loadPlan(std::string(DMUON_STAGE_PLAN_DIR) + "/pipeline-tp-1.plan");
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = trainSlices(*one, 10, valueOf);
  for (int i = 0; i < one->numParams(); ++i)
    ASSERT_NE(want[static_cast<size_t>(i)][1], 10 * valueOf(i, -1, 1)) << "did not train";
  for (const char *mesh : {"pp2-tp2", "pp2-shard2-tp2"}) {
    std::unique_ptr<LoadedPlan> plan =
        loadPlan(std::string(DMUON_STAGE_PLAN_DIR) + "/pipeline-tp-" + mesh + ".plan");
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = trainSlices(*plan, 10, valueOf);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// A stage that holds no hook group (here every param of it AdamW on the
// replicated route: `--adamw-route=replicated --pipeline-split=embed,head`
// leaves the head alone on stage 1) steps its routes' work from its first
// step, and every stage ends where one rank ends (issue 45 #1). Its
// neighbours: such a stage first (embed) and last (head) of three, and two
// of three stages without one.
TEST(Loopback, StagesWithoutHookGroupsStep) {
  std::unique_ptr<LoadedPlan> one = stagePlan("1-replicated");
  ASSERT_TRUE(one);
  std::vector<double> oneNorm;
  StageRun oneRun;
  oneRun.norms = &oneNorm;
  const std::vector<std::vector<float>> want = trainStages(*one, oneRun);
  for (const char *mesh : {"pp2-head-alone", "pp3-embed-head-alone", "pp2-embed-alone"}) {
    std::unique_ptr<LoadedPlan> plan = stagePlan(mesh);
    ASSERT_TRUE(plan);
    const int stages = plan->root().mesh()->num_stages();
    std::vector<bool> hooked(static_cast<size_t>(stages), false);
    for (const auto *g : *plan->root().hook_groups())
      hooked[static_cast<size_t>(g->pipeline_stage())] = true;
    ASSERT_NE(std::find(hooked.begin(), hooked.end(), false), hooked.end())
        << mesh << ": every stage has a hook group";
    std::vector<double> norms;
    StageRun run;
    run.norms = &norms;
    const std::vector<std::vector<float>> got = trainStages(*plan, run);
    ASSERT_EQ(got.size(), want.size());
    for (double norm : norms)
      EXPECT_NEAR(norm, oneNorm[0], 1e-12 * oneNorm[0]) << mesh;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// grad_norm before step() is collective on such a plan too: the stage
// without hook groups joins the measure the others start (it runs no
// micro-batch of its own), and every rank reports the one norm.
TEST(Loopback, GradNormBeforeStepOnAStageWithoutHookGroups) {
  std::unique_ptr<LoadedPlan> plan = stagePlan("pp2-head-alone");
  ASSERT_TRUE(plan);
  std::vector<double> norms(2, 0);
  runWorld(
      *plan,
      [&](int rank, Executor &ex) {
        bindStage(*plan, ex, rank);
        runStageHooks(*plan, ex, rank);
        dmuon_grad_norm_t norm{};
        norm.struct_size = sizeof norm;
        norm.version = DMUON_GRAD_NORM_VERSION;
        Status s = ex.gradNorm(norm);
        ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
        norms[static_cast<size_t>(rank)] = norm.total;
        s = ex.step();
        EXPECT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
      },
      /*timeout=*/0);
  EXPECT_GT(norms[0], 0);
  EXPECT_EQ(norms[0], norms[1]);
}

// A rank that refuses step() before its collectives makes every rank fail
// with it, even without a timeout (0: a peer would otherwise wait forever):
// a step before any hook, a step with a param unbound, a step before the
// last post_backward, and grad_norm before the last post_backward, each on
// rank 1 of pp=2 (on the stage without hook groups for the unbound param)
// while rank 0 does everything right (issue 45 #1).
TEST(Loopback, ARankThatRefusesStepFailsItsPeersToo) {
  struct Case {
    const char *what, *plan, *error;
    bool bind, hooks, lastPostBackward, normFirst;
  };
  const Case cases[] = {
      {"no hooks", "pp2", "step before any forward/backward", true, false, true, false},
      {"unbound", "pp2-head-alone", "is not bound (bind every param first)", false, true, true,
       false},
      {"no last post_backward", "pp2", "finish_backward before post_backward of", true, true,
       false, false},
      {"grad_norm, no last post_backward", "pp2", "finish_backward before post_backward of", true,
       true, false, true},
  };
  for (const Case &c : cases) {
    std::unique_ptr<LoadedPlan> plan = stagePlan(c.plan);
    ASSERT_TRUE(plan);
    std::vector<Status> got(2);
    runWorld(
        *plan,
        [&](int rank, Executor &ex) {
          const bool wrong = rank == 1;
          if (!wrong || c.bind)
            bindStage(*plan, ex, rank);
          if (!wrong || c.hooks)
            runStageHooks(*plan, ex, rank, !wrong || c.lastPostBackward, !wrong || c.bind);
          if (c.normFirst) {
            dmuon_grad_norm_t norm{};
            norm.struct_size = sizeof norm;
            norm.version = DMUON_GRAD_NORM_VERSION;
            got[static_cast<size_t>(rank)] = ex.gradNorm(norm);
          } else {
            got[static_cast<size_t>(rank)] = ex.step();
          }
        },
        /*timeout=*/0);
    EXPECT_NE(got[1].message().find(c.error), std::string::npos) << c.what << ": "
                                                                 << got[1].message();
    EXPECT_EQ(got[0].code(), got[1].code()) << c.what;
    EXPECT_NE(got[0].message().find(" failed on rank 1 (see that rank's error)"),
              std::string::npos)
        << c.what << ": " << got[0].message();
  }
}

// A rank refuses another stage's params and hooks by name.
TEST(Loopback, AnotherStagesParamsAndHooksAreRefused) {
  std::unique_ptr<LoadedPlan> plan = stagePlan("pp2");
  ASSERT_TRUE(plan);
  runWorld(*plan, [&](int rank, Executor &ex) {
    const int other = 1 - rank; // pp=2: rank r is stage r
    int param = -1, group = -1;
    for (int i = 0; i < plan->numParams() && param < 0; ++i)
      if (plan->param(i).pipeline_stage() == other)
        param = i;
    for (int g = 0; g < static_cast<int>(plan->root().hook_groups()->size()) && group < 0; ++g)
      if (plan->root().hook_groups()->Get(g)->pipeline_stage() == other)
        group = g;
    ASSERT_GE(param, 0);
    ASSERT_GE(group, 0);
    const std::string name = plan->param(param).name()->str();
    std::vector<float> v(static_cast<size_t>(numel(plan->param(param))));
    Status s = ex.bindParam(name, v.data(), static_cast<int64_t>(v.size()));
    EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(s.message(), "bind_param('" + name + "'): param '" + name +
                               "' is on pipeline stage " + std::to_string(other) + "; rank " +
                               std::to_string(rank) + " is on stage " + std::to_string(rank) +
                               " and holds its own stage's params only (dmuon_plan_param_stage)");
    s = ex.preForward(group);
    EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(s.message().find("is on pipeline stage " + std::to_string(other) + "; rank " +
                               std::to_string(rank) + " is on stage " + std::to_string(rank) +
                               " and runs its own stage's hooks only"),
              std::string::npos)
        << s.message();
    float *g = nullptr;
    EXPECT_EQ(ex.gradView(param, &g).code(), DMUON_ERROR_INVALID_ARGUMENT);
  });
}

// A checkpoint saved on stages resumes on other stages and on no stages:
// every param's state is saved once, by its stage's ranks, and re-assembled
// from the shards that hold it. pp=2,dp_shard=2 saves after 2 steps; pp=4,
// one rank and 2x2 resume for 2 more, as does pp=4 from a one-rank save;
// each ends where 4 uninterrupted steps on one rank end.
TEST(Loopback, PipelineCheckpointsResumeOnAnotherPp) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "dmuon-pp-checkpoints";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::unique_ptr<LoadedPlan> one = loadPlan(tinyPlan("1"));
  ASSERT_TRUE(one);
  StageRun whole;
  whole.steps = 4;
  const std::vector<std::vector<float>> want = trainStages(*one, whole);
  auto saveOn = [&](const LoadedPlan &plan, const std::string &name) {
    StageRun first;
    first.steps = 2;
    first.saveTo = (dir / name).string();
    trainStages(plan, first);
    return first.saveTo;
  };
  auto resumeOn = [&](const LoadedPlan &plan, const std::string &from) {
    StageRun rest;
    rest.steps = 2;
    rest.firstStep = 2;
    rest.resumeFrom = from;
    return trainStages(plan, rest);
  };
  std::unique_ptr<LoadedPlan> pp2 = stagePlan("pp2-shard2"), pp4 = stagePlan("pp4");
  std::unique_ptr<LoadedPlan> hsdp = loadPlan(tinyPlan("2x2"));
  ASSERT_TRUE(pp2 && pp4 && hsdp);
  const std::string fromStages = saveOn(*pp2, "pp2");
  for (const LoadedPlan *plan : {pp4.get(), one.get(), hsdp.get()}) {
    const std::vector<std::vector<float>> got = resumeOn(*plan, fromStages);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "pp=2,dp_shard=2 -> world " << plan->worldSize() << ": "
                                 << one->param(static_cast<int>(i)).name()->str();
  }
  const std::vector<std::vector<float>> got = resumeOn(*pp4, saveOn(*one, "one"));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "1 -> pp=4: " << one->param(static_cast<int>(i)).name()->str();
  std::filesystem::remove_all(dir);
}
