// A pipelined host of the tiny model (hosts/tiny/TinyModel.h) under real
// MPI, run by ctest on 4 ranks: the model cut into the plan's stages
// (docs/dmuonc.md#pipeline-stages), a GPipe or a 1F1B schedule over M
// micro-batches of each rank's data-parallel slice, the residual stream h
// (rows x D) sent forward and its gradient back with MPI point-to-point
// between the ranks of adjacent stages that share every other mesh
// coordinate, and libdmuon doing the optimizer work for each rank's own
// stage only (docs/runtime.md#pipeline-stages: its params bound, its hook
// groups driven around the pipeline's micro-batches as one runtime
// micro-batch).
//
// Checks, over 10 steps:
//   * every param after 10 steps within 1e-5 relative error (max abs diff /
//     max abs value; mixed_mpi_test's tolerance, mpi_test allows 1e-4) of the
//     single-process Muon+AdamW reference on the full global batch
//     (runReference); the step-0 loss and the runtime's step-0 global
//     gradient norm within 1e-6 of the reference's (the norm shows a wrong
//     micro-batch share, which Muon's scale-free update would hide);
//   * bit for bit the losses and params of the same host without a pipeline:
//     the plan of the mesh's data-parallel dims alone (`--flat-plan`: 1 rank
//     for pp=4, dp_shard=2 for pp=2,dp_shard=2, ...), run on the ranks of
//     each stage (MPI_Comm_split) through the same micro-batches in the same
//     order. Bit identity holds there because every rank adds its
//     micro-batches' gradients into the runtime's gradient views in the same
//     order (0..M-1 on every stage under both schedules) with the same gemms,
//     and the runtime then sums over 2 data-parallel ranks at most (a + b
//     in either order is the same float). It cannot hold against the single-process
//     reference, which computes each gradient with one gemm over all 64 rows
//     rather than summing per-micro-batch and per-rank partial gemms: float
//     sums in another order;
//   * every rank of a stage gathers the same values of its stage's params;
//   * the schedule ran: M micro-batches in flight at most on every stage
//     under GPipe, min(P - s, M) on stage s under 1F1B.
//
// With --resume-plan R (and --resume-flat-plan RF, --checkpoint-dir D): a
// checkpoint resumed at another pp instead. Steps 0..4 on --plan, saved to D
// (dmuon_checkpoint_save) and the runtime destroyed; then a runtime of R on
// the same ranks binds its stage's params, loads D and trains steps 5..9 (the
// same data as an uninterrupted run). Checks: the 10 steps against the
// single-process reference as above; steps 5..9 bit for bit the same resume
// on RF (R's data-parallel dims alone, on each of R's stages' ranks); and the
// params within kPipelineRelTol of 10 uninterrupted steps on R. Not bit for
// bit those: steps 0..4 on --plan split the batch into other micro-batches and
// ranks than R does, so their gradients are float sums in another order.
//
// usage: mpirun -n 4 dmuon-pipeline-test --plan P --flat-plan F
//            --schedule gpipe|1f1b [--micro-batches M]
//            [--resume-plan R --resume-flat-plan RF --checkpoint-dir D]
#include "PipelineSchedule.h"
#include "TinyRuns.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

// Each mesh and schedule measured 2.3e-6 to 2.4e-6 when this was written.
constexpr double kPipelineRelTol = 1e-5;

using tiny::Schedule;
using tiny::stageOrder;

int paramStage(const dmuon::Plan &plan, const std::string &name) {
  int stage = -1;
  if (dmuon_plan_param_stage(plan.get(), plan.findParam(name), &stage) != DMUON_SUCCESS)
    throw std::runtime_error("dmuon_plan_param_stage(" + name + "): " + dmuon_last_error());
  return stage;
}

// Where one rank of a plan's mesh sits in the pipeline.
struct Place {
  int stage = 0, stages = 1;
  int prev = -1, next = -1;    // ranks of the stages before and after, same other coordinates
  int dpIndex = 0, dpSize = 1; // replicate * G + shard: which slice of the global batch
  int first = 0, last = 0;     // the stage's modules (tiny::kEmbedModule..headModule)
  std::vector<int> stageRoot;  // per stage, its rank with every other coordinate 0
};

Place placeOf(const dmuon::Plan &plan, const tiny::Config &cfg, int rank) {
  const dmuon_mesh_info_t mesh = plan.mesh();
  Place p;
  p.stages = dmuon_plan_num_stages(plan.get());
  if (dmuon_plan_rank_stage(plan.get(), rank, &p.stage) != DMUON_SUCCESS)
    throw std::runtime_error(std::string("dmuon_plan_rank_stage: ") + dmuon_last_error());
  // Row-major coordinates; the stage dim is the one whose unit step moves to stage 1.
  std::vector<int> stride(static_cast<size_t>(mesh.ndim), 1), coord(stride.size());
  for (int d = mesh.ndim - 2; d >= 0; --d)
    stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * mesh.dim_sizes[d + 1];
  int stageStride = 0;
  for (int d = 0; d < mesh.ndim; ++d) {
    const size_t i = static_cast<size_t>(d);
    coord[i] = rank / stride[i] % mesh.dim_sizes[d];
    int s = 0;
    if (mesh.dim_sizes[d] > 1 &&
        dmuon_plan_rank_stage(plan.get(), stride[i], &s) == DMUON_SUCCESS && s == 1)
      stageStride = stride[i];
    else if (mesh.dim_sizes[d] > 1 && d != mesh.shard_dim && d != mesh.replicate_dim)
      throw std::runtime_error(std::string("mesh dim '") + mesh.dim_names[d] +
                               "': the tiny pipelined host has no model parallelism");
  }
  if (p.stages > 1 && stageStride == 0)
    throw std::runtime_error("no mesh dim steps from stage 0 to stage 1");
  if (p.stage > 0)
    p.prev = rank - stageStride;
  if (p.stage + 1 < p.stages)
    p.next = rank + stageStride;
  for (int s = 0; s < p.stages; ++s)
    p.stageRoot.push_back(s * stageStride);
  const int shard = mesh.shard_dim >= 0 ? coord[static_cast<size_t>(mesh.shard_dim)] : 0;
  const int replicate =
      mesh.replicate_dim >= 0 ? coord[static_cast<size_t>(mesh.replicate_dim)] : 0;
  p.dpIndex = replicate * mesh.num_shards + shard;
  p.dpSize = mesh.num_shards * mesh.num_replicas;

  // The stage's modules: those whose params the plan puts on it, a
  // contiguous run in model order (stages never decrease along it).
  p.first = tiny::headModule(cfg) + 1;
  p.last = tiny::kEmbedModule - 1;
  int before = 0;
  for (const tiny::ParamSpec &spec : tiny::paramSpecs(cfg)) {
    const int s = paramStage(plan, spec.name);
    if (s < before)
      throw std::runtime_error("param '" + spec.name +
                               "' is on a stage before the one of a param before it");
    before = s;
    if (s == p.stage) {
      p.first = std::min(p.first, spec.layer);
      p.last = std::max(p.last, spec.layer);
    }
  }
  if (p.first > p.last)
    throw std::runtime_error("stage " + std::to_string(p.stage) + " has no module");
  return p;
}

// The runtime's views and hooks for one stage's modules, driven as
// docs/runtime.md, "Pipeline stages" says: one runtime micro-batch around the
// pipeline's M, each hook group's pre_forward / post_forward around its first
// micro-batch's forward, pre_backward before its first backward and
// post_backward after its last; every micro-batch adds its gradient into the
// views in between, and reads the values (a Z2 plan keeps them) at each
// forward and backward.
class StageAccess : public tiny::ParamAccess {
public:
  StageAccess(dmuon::Runtime &rt, const tiny::PlanBinding &binding, int microBatches)
      : rt_(rt), binding_(binding), microBatches_(microBatches) {}
  void setMicroBatch(int j) { j_ = j; }
  const float *param(const std::string &name) override {
    return static_cast<const float *>(rt_.paramView(binding_.paramIndex(name)));
  }
  float *grad(const std::string &name) override { return rt_.gradView(binding_.paramIndex(name)); }
  void beforeLayerForward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0 && j_ == 0)
      rt_.preForward(g);
  }
  void afterLayerForward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0 && j_ == 0)
      rt_.postForward(g);
  }
  void beforeLayerBackward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0 && j_ == 0)
      rt_.preBackward(g);
  }
  void afterLayerBackward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0 && j_ == microBatches_ - 1)
      rt_.postBackward(g);
  }

private:
  dmuon::Runtime &rt_;
  const tiny::PlanBinding &binding_;
  int microBatches_;
  int j_ = 0;
};

struct Run {
  std::vector<float> losses; // global mean loss per step
  std::vector<double> norms; // the runtime's global gradient norm per step
  Params final;              // every param after the last step, on every rank
};

// Tags of one micro-batch's messages: h forward, its gradient back.
int forwardTag(int j) { return 2 * j; }
int backwardTag(int j) { return 2 * j + 1; }

// Steps firstStep..lastStep-1 of the tiny model on `plan` over `comm` (its
// world), each rank running its stage's modules for its slice of the global
// batch under `schedule`. A plan with one stage runs every module on every
// rank: the same host without a pipeline. With `resumeFrom`, the state after
// binding is that checkpoint's (saved at firstStep); with `saveTo`, the
// state after the last step is saved there.
Run runPipeline(const dmuon::Plan &plan, MPI_Comm comm, const tiny::Config &cfg, Schedule schedule,
                int microBatches, int firstStep = 0, int lastStep = kSteps,
                const std::string &resumeFrom = "", const std::string &saveTo = "") {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (plan.worldSize() != size)
    throw std::runtime_error("the plan is for " + std::to_string(plan.worldSize()) +
                             " ranks, its communicator has " + std::to_string(size));
  const Place place = placeOf(plan, cfg, rank);
  const tiny::PlanBinding binding(plan, cfg);

  MPI_Comm runtimeComm = comm;
  dmuon_runtime_options_t opt = makeOptions(&runtimeComm, DMUON_MODE_FROM_PLAN, 1);
  dmuon::Runtime rt(plan, opt);
  // A rank binds its own stage's params only (another stage's are refused).
  for (const tiny::ParamSpec &spec : tiny::paramSpecs(cfg))
    if (paramStage(plan, spec.name) == place.stage) {
      std::vector<float> v = tiny::initParam(cfg, spec, kSeed);
      rt.bindParam(spec.name, v.data(), spec.numel);
    }
  if (!resumeFrom.empty()) {
    const int64_t saved = rt.loadCheckpoint(resumeFrom);
    if (saved != firstStep)
      fail("the checkpoint %s was saved at step %lld, not %d", resumeFrom.c_str(),
           static_cast<long long>(saved), firstStep);
  }

  const int64_t local = cfg.globalBatch / place.dpSize;
  const int64_t rows = local / microBatches;
  if (rows * microBatches * place.dpSize != cfg.globalBatch)
    throw std::runtime_error("the global batch does not split into " +
                             std::to_string(place.dpSize) + " x " + std::to_string(microBatches) +
                             " equal micro-batches");
  const size_t M = static_cast<size_t>(microBatches);
  const int count = static_cast<int>(rows * cfg.dim);
  // One model per micro-batch: each keeps its activations from its forward
  // to its backward, several in flight at once under either schedule.
  std::vector<tiny::Model> models(M, tiny::Model(cfg, rows));
  auto buffers = [&](int64_t width) {
    return std::vector<std::vector<float>>(M,
                                           std::vector<float>(static_cast<size_t>(rows * width)));
  };
  std::vector<std::vector<float>> x = buffers(cfg.inDim), t = buffers(cfg.outDim);
  std::vector<std::vector<float>> hIn = buffers(cfg.dim), hOut = buffers(cfg.dim);
  std::vector<std::vector<float>> dIn = buffers(cfg.dim), dOut = buffers(cfg.dim);
  tiny::Data data(cfg, kSeed);
  StageAccess access(rt, binding, microBatches);

  Run run;
  for (int step = firstStep; step < lastStep; ++step) {
    for (size_t j = 0; j < M; ++j)
      data.batch(step, place.dpIndex * local + static_cast<int64_t>(j) * rows, rows, x[j].data(),
                 t[j].data());
    double lossSum = 0;
    // Sends never block the schedule (a blocking send of a large message
    // would wait for its receive, and 1F1B's crossing sends could deadlock);
    // every buffer stays untouched until the step's Waitall.
    std::vector<MPI_Request> sends;
    int inFlight = 0, mostInFlight = 0; // micro-batches between their forward and backward
    for (auto [forward, jj] : stageOrder(schedule, place.stage, place.stages, microBatches)) {
      const size_t j = static_cast<size_t>(jj);
      access.setMicroBatch(jj);
      inFlight += forward ? 1 : -1;
      mostInFlight = std::max(mostInFlight, inFlight);
      if (forward) {
        const float *in = x[j].data();
        if (place.prev >= 0) {
          MPI_Recv(hIn[j].data(), count, MPI_FLOAT, place.prev, forwardTag(jj), comm,
                   MPI_STATUS_IGNORE);
          in = hIn[j].data();
        }
        const float loss = models[j].forwardModules(access, place.first, place.last, in,
                                                    t[j].data(), microBatches);
        if (place.next >= 0) {
          const float *h = models[j].hidden(place.last + 1);
          std::copy(h, h + count, hOut[j].begin());
          sends.emplace_back();
          MPI_Isend(hOut[j].data(), count, MPI_FLOAT, place.next, forwardTag(jj), comm,
                    &sends.back());
        } else {
          lossSum += loss;
        }
        continue;
      }
      const float *gradOut = nullptr;
      if (place.next >= 0) {
        MPI_Recv(dIn[j].data(), count, MPI_FLOAT, place.next, backwardTag(jj), comm,
                 MPI_STATUS_IGNORE);
        gradOut = dIn[j].data();
      }
      const float *gradIn =
          models[j].backwardModules(access, place.first, place.last, x[j].data(), gradOut);
      if (place.prev >= 0) {
        std::copy(gradIn, gradIn + count, dOut[j].begin());
        sends.emplace_back();
        MPI_Isend(dOut[j].data(), count, MPI_FLOAT, place.prev, backwardTag(jj), comm,
                  &sends.back());
      }
    }
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    // What tells the schedules apart: GPipe holds every micro-batch's
    // activations at once, 1F1B at most the P - s its warm-up leaves.
    const int want = schedule == Schedule::GPipe
                         ? microBatches
                         : std::min(place.stages - place.stage, microBatches);
    if (step == firstStep && mostInFlight != want)
      fail("stage %d: %d micro-batches in flight at most, the schedule keeps %d", place.stage,
           mostInFlight, want);
    rt.step();
    run.norms.push_back(rt.gradNorm().total);
    // The last stage's ranks hold the losses (the others add 0, exactly).
    double sum = 0;
    MPI_Allreduce(&lossSum, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
    run.losses.push_back(static_cast<float>(sum / (place.dpSize * microBatches)));
  }
  rt.synchronize();
  if (!saveTo.empty())
    rt.saveCheckpoint(saveTo, lastStep);

  // Every param from its stage's ranks (each gathers it; they must agree),
  // then from the stage's first rank to every rank.
  for (const tiny::ParamSpec &spec : tiny::paramSpecs(cfg)) {
    const int s = paramStage(plan, spec.name);
    std::vector<float> mine(static_cast<size_t>(spec.numel)), v(mine.size());
    if (s == place.stage)
      rt.gatherParam(spec.name, mine.data(), spec.numel);
    v = mine;
    MPI_Bcast(v.data(), static_cast<int>(v.size()), MPI_FLOAT,
              place.stageRoot[static_cast<size_t>(s)], comm);
    if (s == place.stage && v != mine)
      fail("rank %d of stage %d gathered other values of %s than its stage's first rank", rank, s,
           spec.name.c_str());
    run.final[spec.name] = std::move(v);
  }
  return run;
}

void expectIdentical(const Run &got, const Run &want, const std::string &what) {
  const int before = gFailures;
  for (size_t i = 0; i < want.losses.size(); ++i)
    if (mpicheck::bits(got.losses[i]) != mpicheck::bits(want.losses[i]))
      fail("%s: loss at step %zu is %.9g, without the pipeline %.9g", what.c_str(), i,
           static_cast<double>(got.losses[i]), static_cast<double>(want.losses[i]));
  for (const auto &[name, w] : want.final) {
    const std::vector<float> &g = got.final.at(name);
    size_t diff = 0;
    for (size_t i = 0; i < w.size(); ++i)
      diff += mpicheck::bits(g[i]) != mpicheck::bits(w[i]);
    if (diff)
      fail("%s: %s differs in %zu of %zu elements after %zu steps from the run without the "
           "pipeline",
           what.c_str(), name.c_str(), diff, w.size(), want.losses.size());
  }
  if (gFailures == before)
    info("%s: bit-identical losses and params over %zu steps to the same micro-batches without "
         "the pipeline",
         what.c_str(), want.losses.size());
}

// The norm of the gradient of the mean loss over the global batch at step 0,
// in one process. Muon's update does not change with the gradient's scale and
// AdamW's barely does, so the params alone would not show a micro-batch's
// gradient share scaled wrong; the norm does.
double referenceNorm(const tiny::Config &cfg) {
  tiny::ParamStore store(cfg, kSeed);
  tiny::Data data(cfg, kSeed);
  tiny::Model model(cfg, cfg.globalBatch);
  std::vector<float> x(static_cast<size_t>(cfg.globalBatch * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(cfg.globalBatch * cfg.outDim));
  data.batch(0, 0, cfg.globalBatch, x.data(), t.data());
  model.forwardBackward(store, x.data(), t.data());
  double sum = 0;
  for (const tiny::ParamSpec &spec : store.specs())
    for (float g : store.grads(spec.name))
      sum += static_cast<double>(g) * g;
  return std::sqrt(sum);
}

void compareWithReference(const Run &got, const Trajectory &ref, double refNorm,
                          const std::string &what) {
  const double l0 = got.losses[0], r0 = ref.losses[0];
  const double lossErr = std::fabs(l0 - r0) / std::max(1e-30, std::fabs(r0));
  if (lossErr > 1e-6)
    fail("%s: loss at step 0 %.9g, reference %.9g (relative error %.3g)", what.c_str(), l0, r0,
         lossErr);
  const double normErr = std::fabs(got.norms[0] - refNorm) / refNorm;
  if (normErr > 1e-6)
    fail("%s: gradient norm at step 0 %.9g, reference %.9g (relative error %.3g)", what.c_str(),
         got.norms[0], refNorm, normErr);
  const auto [worst, worstName] =
      worstParamDiff(got.final, ref.final, [&](const std::string &name, const ParamDiff &d) {
        if (d.rel > kPipelineRelTol)
          fail("%s: %s after %d steps: relative error %.3g vs the single-process reference "
               "(tolerance %g)",
               what.c_str(), name.c_str(), kSteps, d.rel, kPipelineRelTol);
      });
  // The reference must have trained, or agreeing with it would say little.
  if (ref.final.at("layers.0.fc1.weight") == ref.initial.at("layers.0.fc1.weight"))
    fail("%s: the reference did not change layers.0.fc1.weight", what.c_str());
  info("%s vs single-process reference: loss step 0 %.6f (ref %.6f), step %d %.6f (ref %.6f); "
       "gradient norm step 0 relative error %.3g; worst param relative error %.3g (%s)",
       what.c_str(), l0, r0, kSteps - 1, static_cast<double>(got.losses.back()),
       static_cast<double>(ref.losses.back()), normErr, worst, worstName.c_str());
}

// Steps 0..kResumeStep-1 on `plan`, saved to `dir`; steps kResumeStep..kSteps-1
// resumed from it on `resume` (another pp); see the header.
constexpr int kResumeStep = 5;

void checkpointAcrossPp(const dmuon::Plan &plan, const dmuon::Plan &resume,
                        const dmuon::Plan &resumeFlat, const std::string &dir,
                        const tiny::Config &cfg, Schedule schedule, int microBatches,
                        const std::string &what) {
  if (gRank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string ckpt = dir + "/step5";
  // Each runPipeline destroys its runtime before it returns.
  const Run before =
      runPipeline(plan, MPI_COMM_WORLD, cfg, schedule, microBatches, 0, kResumeStep, "", ckpt);
  const Run after = runPipeline(resume, MPI_COMM_WORLD, cfg, schedule, microBatches, kResumeStep,
                                kSteps, ckpt, "");
  Run whole = before;
  whole.losses.insert(whole.losses.end(), after.losses.begin(), after.losses.end());
  whole.norms.insert(whole.norms.end(), after.norms.begin(), after.norms.end());
  whole.final = after.final;
  compareWithReference(whole, runReference(plan, cfg), referenceNorm(cfg), what);

  // The same resume on the resume plan's data-parallel dims alone, on each of
  // its stages' ranks: bit for bit, as the uninterrupted runs above.
  const Place place = placeOf(resume, cfg, gRank);
  MPI_Comm stageComm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, place.stage, place.dpIndex, &stageComm);
  const Run flat = runPipeline(resumeFlat, stageComm, cfg, schedule, microBatches, kResumeStep,
                               kSteps, ckpt, "");
  MPI_Comm_free(&stageComm);
  expectIdentical(after, flat, what + ", resumed");

  // Ten uninterrupted steps on the resume plan: close, not bit for bit (the
  // first five steps split the batch otherwise; see the header).
  const Run straight = runPipeline(resume, MPI_COMM_WORLD, cfg, schedule, microBatches);
  const auto [rel, name] = worstParamDiff(whole.final, straight.final);
  if (rel > kPipelineRelTol)
    fail("%s: %s after the resume is %.3g relative from %d uninterrupted steps on the resume "
         "plan (tolerance %g)",
         what.c_str(), name.c_str(), rel, kSteps, kPipelineRelTol);
  info("%s: worst param relative difference from %d uninterrupted steps on the resume plan "
       "%.3g (%s)",
       what.c_str(), kSteps, rel, name.c_str());
}

int usage() {
  if (gRank == 0)
    std::fprintf(stderr, "usage: dmuon-pipeline-test --plan PLAN --flat-plan PLAN "
                         "--schedule gpipe|1f1b [--micro-batches M] [--resume-plan PLAN "
                         "--resume-flat-plan PLAN --checkpoint-dir DIR]\n");
  return 2;
}

int runTests(int argc, char **argv) {
  std::string planPath, flatPath, scheduleText, resumePath, resumeFlatPath, ckptDir;
  int microBatches = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc)
      return usage();
    const std::string v = argv[++i];
    if (a == "--plan")
      planPath = v;
    else if (a == "--flat-plan")
      flatPath = v;
    else if (a == "--schedule")
      scheduleText = v;
    else if (a == "--micro-batches")
      microBatches = std::stoi(v);
    else if (a == "--resume-plan")
      resumePath = v;
    else if (a == "--resume-flat-plan")
      resumeFlatPath = v;
    else if (a == "--checkpoint-dir")
      ckptDir = v;
    else
      return usage();
  }
  if (planPath.empty() || flatPath.empty() || microBatches < 1 ||
      (scheduleText != "gpipe" && scheduleText != "1f1b") ||
      (!resumePath.empty() && (resumeFlatPath.empty() || ckptDir.empty())))
    return usage();
  const Schedule schedule = scheduleText == "gpipe" ? Schedule::GPipe : Schedule::OneFOneB;

  const dmuon::Plan plan(planPath), flat(flatPath);
  const tiny::Config cfg;
  const Place place = placeOf(plan, cfg, gRank);
  if (place.stages < 2)
    fail("the plan '%s' has %d stage(s); the test wants a pipeline", planPath.c_str(),
         place.stages);
  const std::string what = planPath.substr(planPath.find_last_of('/') + 1) + " " + scheduleText +
                           ", " + std::to_string(microBatches) + " micro-batches";
  std::printf("rank %d: stage %d of %d, modules %d..%d, data-parallel slice %d of %d, "
              "previous rank %d, next rank %d\n",
              gRank, place.stage, place.stages, place.first, place.last, place.dpIndex,
              place.dpSize, place.prev, place.next);
  std::fflush(stdout);

  if (!resumePath.empty()) {
    const dmuon::Plan resume(resumePath), resumeFlat(resumeFlatPath);
    checkpointAcrossPp(plan, resume, resumeFlat, ckptDir, cfg, schedule, microBatches,
                       what + ", checkpoint at step 5 resumed on " +
                           resumePath.substr(resumePath.find_last_of('/') + 1));
    return 0;
  }

  const Run piped = runPipeline(plan, MPI_COMM_WORLD, cfg, schedule, microBatches);
  compareWithReference(piped, runReference(plan, cfg), referenceNorm(cfg), what);

  // The same host on the data-parallel ranks of each stage, without a pipeline.
  MPI_Comm stageComm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, place.stage, place.dpIndex, &stageComm);
  const Run unpiped = runPipeline(flat, stageComm, cfg, schedule, microBatches);
  MPI_Comm_free(&stageComm);
  expectIdentical(piped, unpiped, what);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
