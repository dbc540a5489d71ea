// Header-only C++ wrapper over the C ABI: RAII handles, exceptions on error.
#ifndef DMUON_DMUON_HPP
#define DMUON_DMUON_HPP

#include "dmuon/dmuon.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace dmuon {

class Error : public std::runtime_error {
public:
  Error(dmuon_status_t status, const std::string &message)
      : std::runtime_error(std::string(dmuon_status_string(status)) + ": " + message),
        status_(status) {}
  dmuon_status_t status() const { return status_; }

private:
  dmuon_status_t status_;
};

inline void check(dmuon_status_t status) {
  if (status != DMUON_SUCCESS)
    throw Error(status, dmuon_last_error());
}

// An output struct with its size and version set, as the C ABI wants.
template <typename T> T versioned(uint32_t version) {
  T out{};
  out.struct_size = sizeof out;
  out.version = version;
  return out;
}

class Plan {
public:
  explicit Plan(const std::string &path) { check(dmuon_plan_load_file(path.c_str(), &plan_)); }
  Plan(const void *data, size_t size) { check(dmuon_plan_load_buffer(data, size, &plan_)); }
  Plan(Plan &&o) noexcept : plan_(std::exchange(o.plan_, nullptr)) {}
  Plan &operator=(Plan &&o) noexcept {
    std::swap(plan_, o.plan_);
    return *this;
  }
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() { dmuon_plan_destroy(plan_); }

  dmuon_plan_t get() const { return plan_; }
  uint64_t fingerprint() const { return dmuon_plan_fingerprint(plan_); }
  int worldSize() const { return dmuon_plan_world_size(plan_); }
  int numParams() const { return dmuon_plan_num_params(plan_); }
  int numHookGroups() const { return dmuon_plan_num_hook_groups(plan_); }
  std::string hookGroupName(int g) const { return dmuon_plan_hook_group_name(plan_, g); }
  dmuon_mesh_info_t mesh() const {
    auto m = versioned<dmuon_mesh_info_t>(DMUON_MESH_INFO_VERSION);
    check(dmuon_plan_mesh(plan_, &m));
    return m;
  }
  dmuon_param_info_t param(int index) const {
    auto info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
    check(dmuon_plan_param_info(plan_, index, &info));
    return info;
  }
  dmuon_param_route_t paramRoute(int index) const {
    auto r = versioned<dmuon_param_route_t>(DMUON_PARAM_ROUTE_VERSION);
    check(dmuon_plan_param_route(plan_, index, &r));
    return r;
  }
  int findParam(const std::string &name) const {
    int index;
    check(dmuon_plan_find_param(plan_, name.c_str(), &index));
    return index;
  }
  int numQkClipPairs() const { return dmuon_plan_num_qk_clip_pairs(plan_); }
  dmuon_qk_clip_pair_info_t qkClipPair(int index) const {
    auto info = versioned<dmuon_qk_clip_pair_info_t>(DMUON_QK_CLIP_PAIR_INFO_VERSION);
    check(dmuon_plan_qk_clip_pair(plan_, index, &info));
    return info;
  }
  double qkClipTau() const { return dmuon_plan_qk_clip_tau(plan_); }
  // Pipeline stages: one, 0, without a pp dim.
  int numStages() const { return dmuon_plan_num_stages(plan_); }
  int rankStage(int rank) const { return stageOf(dmuon_plan_rank_stage, rank); }
  int paramStage(int index) const { return stageOf(dmuon_plan_param_stage, index); }
  int hookGroupStage(int g) const { return stageOf(dmuon_plan_hook_group_stage, g); }

private:
  int stageOf(dmuon_status_t (*query)(dmuon_plan_t, int, int *), int index) const {
    int stage = 0;
    check(query(plan_, index, &stage));
    return stage;
  }

  dmuon_plan_t plan_ = nullptr;
};

class Runtime {
public:
  // The runtime keeps the plan alive; `plan` may go first.
  Runtime(const Plan &plan, const dmuon_runtime_options_t &options) : backend_(options.backend) {
    check(dmuon_runtime_create(plan.get(), &options, &rt_));
  }
  Runtime(Runtime &&o) noexcept : rt_(std::exchange(o.rt_, nullptr)), backend_(o.backend_) {}
  Runtime &operator=(Runtime &&o) noexcept {
    std::swap(rt_, o.rt_);
    std::swap(backend_, o.backend_);
    return *this;
  }
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;
  ~Runtime() { dmuon_runtime_destroy(rt_); }

  dmuon_runtime_t get() const { return rt_; }
  // What the views point into: host memory (MPI) or the device's (NCCL).
  dmuon_backend_t backend() const { return backend_; }
  void bindParam(const std::string &name, const float *values, int64_t numel) {
    call(dmuon_runtime_bind_param(rt_, name.c_str(), values, numel));
  }
  // The per-layer views take the param's plan index (Plan::findParam).
  void *paramView(int param) {
    void *p = nullptr;
    call(dmuon_runtime_param_view(rt_, param, &p));
    return p;
  }
  float *gradView(int param) {
    float *g = nullptr;
    call(dmuon_runtime_grad_view(rt_, param, &g));
    return g;
  }
  void preForward(int g) { call(dmuon_runtime_pre_forward(rt_, g)); }
  void postForward(int g) { call(dmuon_runtime_post_forward(rt_, g)); }
  void preBackward(int g) { call(dmuon_runtime_pre_backward(rt_, g)); }
  void postBackward(int g) { call(dmuon_runtime_post_backward(rt_, g)); }
  void finishBackward() { call(dmuon_runtime_finish_backward(rt_)); }
  // False when the step was skipped for a non-finite gradient (nothing
  // changed); throws on errors.
  bool step() {
    const dmuon_status_t s = dmuon_runtime_step(rt_);
    if (s == DMUON_STEP_SKIPPED)
      return false;
    call(s);
    return true;
  }
  void beginMicroBatch(bool isLast) { call(dmuon_runtime_begin_micro_batch(rt_, isLast)); }
  // Collective; NaN leaves a value as it is.
  void setHyperParams(const dmuon_hyper_params_t &h) {
    call(dmuon_runtime_set_hyper_params(rt_, &h));
  }
  dmuon_hyper_params_t hyperParams() {
    dmuon_hyper_params_t h;
    dmuon_hyper_params_init(&h);
    call(dmuon_runtime_get_hyper_params(rt_, &h));
    return h;
  }
  void setParamGroupScale(const std::string &pattern, double lrScale, double wdScale) {
    call(dmuon_runtime_set_param_group_scale(rt_, pattern.c_str(), lrScale, wdScale));
  }
  dmuon_grad_norm_t gradNorm() {
    auto n = versioned<dmuon_grad_norm_t>(DMUON_GRAD_NORM_VERSION);
    call(dmuon_runtime_grad_norm(rt_, &n));
    return n;
  }
  // What this rank holds, and the plan's figures for it.
  dmuon_memory_report_t memory() { return memoryReport(dmuon_runtime_memory); }
  dmuon_memory_report_t plannedMemory() { return memoryReport(dmuon_runtime_planned_memory); }
  // {applied, skipped}
  std::pair<int64_t, int64_t> stepCounts() {
    int64_t a = 0, k = 0;
    call(dmuon_runtime_step_counts(rt_, &a, &k));
    return {a, k};
  }
  void synchronize() { call(dmuon_runtime_synchronize(rt_)); }
  // Collective: drops the current step (dmuon_runtime_abandon_step).
  void abandonStep() { call(dmuon_runtime_abandon_step(rt_)); }
  // This rank's per-head max attention logits of a QK-Clip pair, for the
  // next step (the pair's heads floats).
  void setQkMaxLogits(int pair, const float *maxLogits, int64_t count) {
    call(dmuon_runtime_set_qk_max_logits(rt_, pair, maxLogits, count));
  }
  // {heads clipped by the last step, in total}
  std::pair<int64_t, int64_t> qkClipCounts() {
    int64_t last = 0, total = 0;
    call(dmuon_runtime_qk_clip_counts(rt_, &last, &total));
    return {last, total};
  }
  void gatherParam(const std::string &name, float *out, int64_t numel) {
    call(dmuon_runtime_gather_param(rt_, name.c_str(), out, numel));
  }
  void saveCheckpoint(const std::string &path, int64_t step) {
    call(dmuon_checkpoint_save(rt_, path.c_str(), step));
  }
  int64_t loadCheckpoint(const std::string &path) {
    int64_t step = 0;
    call(dmuon_checkpoint_load(rt_, path.c_str(), &step));
    return step;
  }
  dmuon_param_state_t paramState(const std::string &name) {
    auto s = versioned<dmuon_param_state_t>(DMUON_PARAM_STATE_VERSION);
    call(dmuon_runtime_param_state(rt_, name.c_str(), &s));
    return s;
  }
  dmuon_comm_counters_t commCounters() {
    auto c = versioned<dmuon_comm_counters_t>(DMUON_COMM_COUNTERS_VERSION);
    call(dmuon_runtime_comm_counters(rt_, &c));
    return c;
  }
  void resetCommCounters() { call(dmuon_runtime_reset_comm_counters(rt_)); }
  dmuon_comm_counters_t plannedCounters() {
    auto c = versioned<dmuon_comm_counters_t>(DMUON_COMM_COUNTERS_VERSION);
    call(dmuon_runtime_planned_counters(rt_, &c));
    return c;
  }
  double nsFlops() { return dmuon_runtime_ns_flops(rt_); }

private:
  void call(dmuon_status_t s) {
    if (s != DMUON_SUCCESS)
      throw Error(s, dmuon_runtime_last_error(rt_));
  }
  dmuon_memory_report_t memoryReport(dmuon_status_t (*get)(dmuon_runtime_t,
                                                           dmuon_memory_report_t *)) {
    auto m = versioned<dmuon_memory_report_t>(DMUON_MEMORY_REPORT_VERSION);
    call(get(rt_, &m));
    return m;
  }
  dmuon_runtime_t rt_ = nullptr;
  dmuon_backend_t backend_ = DMUON_BACKEND_MPI;
};

} // namespace dmuon

#endif
