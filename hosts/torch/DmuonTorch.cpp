#include "dmuon/torch/DmuonTorch.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

extern char **environ;

namespace dmuon_torch {
namespace {

const char *tomlDtype(c10::ScalarType t) {
  switch (t) {
  case c10::kFloat:
    return "f32";
  case c10::kBFloat16:
    return "bf16";
  case c10::kHalf:
    return "f16";
  case c10::kDouble:
    return "f64";
  default:
    throw std::invalid_argument(std::string("dmuon has no dtype for ") + c10::toString(t));
  }
}

std::string tomlString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + '"';
}

// The runtime's pointer for a param, or null where it has none right now (a
// Muon param outside its group's window). The C call, not the wrapper: "no
// view now" is an expected answer here, not an error.
void *viewOrNull(dmuon::Runtime &rt, int param) {
  void *p = nullptr;
  return dmuon_runtime_param_view(rt.get(), param, &p) == DMUON_SUCCESS ? p : nullptr;
}

// Adds the wall time of its scope to `total` (the bridge's hook time).
class HookTimer {
public:
  explicit HookTimer(double &total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~HookTimer() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  HookTimer(const HookTimer &) = delete;
  HookTimer &operator=(const HookTimer &) = delete;

private:
  double &total_;
  std::chrono::steady_clock::time_point start_;
};

torch::Tensor gradTensor(dmuon::Runtime &rt, int param, at::IntArrayRef shape,
                         c10::Device device) {
  return torch::from_blob(rt.gradView(param), shape,
                          torch::TensorOptions().dtype(torch::kFloat).device(device));
}

} // namespace

// python/dmuon/torch/_manifest.py writes the same text: see its notes.
namespace {

bool isConvModule(const torch::nn::Module &m) {
  static const std::set<std::string> convs = {
      "torch::nn::Conv1dImpl",          "torch::nn::Conv2dImpl",
      "torch::nn::Conv3dImpl",          "torch::nn::ConvTranspose1dImpl",
      "torch::nn::ConvTranspose2dImpl", "torch::nn::ConvTranspose3dImpl"};
  return convs.count(m.name()) > 0;
}

// Names of the params that are a convolution's weight (>= 3 dims).
std::set<std::string> convWeightNames(const torch::nn::Module &model) {
  std::set<std::string> names;
  auto add = [&](const std::string &path, const torch::nn::Module &m) {
    const torch::Tensor *w = m.named_parameters(false).find("weight");
    if (isConvModule(m) && w && w->dim() >= 3)
      names.insert(path.empty() ? "weight" : path + ".weight");
  };
  add("", model);
  // Not include_self: a model made on the stack has no shared_ptr to give.
  for (const auto &nm : model.named_modules("", /*include_self=*/false))
    add(nm.key(), *nm.value());
  return names;
}

// "ns_split = 3" (and its dim) for a fused QKV of three equal blocks.
std::string fusedQkvSplit(const std::string &name, at::IntArrayRef shape) {
  static const std::regex fused(R"((^|\.)(qkv|Wqkv|qkv_proj|c_attn)\.weight$)");
  if (shape.size() != 2 || !std::regex_search(name, fused))
    return "";
  if (shape[0] == 3 * shape[1])
    return "ns_split = 3\n";
  if (shape[1] == 3 * shape[0]) // transformers' Conv1D stores [in, 3 * out]
    return "ns_split = 3\nns_split_dim = \"cols\"\n";
  std::cerr << "warning: param '" << name << "' [" << shape[0] << ", " << shape[1]
            << "] looks like a fused Q/K/V projection but is not three equal blocks: it is "
               "orthogonalized whole; give its blocks with dmuonc --ns-split\n";
  return "";
}

// named_parameters() once per tensor: libtorch lists a tied param under
// every name, torch.nn (and so the plan) under its first.
std::vector<std::pair<std::string, torch::Tensor>> uniqueParams(const torch::nn::Module &model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<const c10::TensorImpl *> seen;
  for (const auto &np : model.named_parameters())
    if (seen.insert(np.value().unsafeGetTensorImpl()).second)
      out.emplace_back(np.key(), np.value());
  return out;
}

} // namespace

std::string manifestToml(const torch::nn::Module &model, const ManifestOptions &options) {
  if (!options.optimizer.empty() && options.optimizer != "adamw" && options.optimizer != "muon")
    throw std::invalid_argument("ManifestOptions::optimizer '" + options.optimizer +
                                "': \"\" or \"muon\" (the matrices on dmuonc's rule: pass "
                                "--matrix-optimizer to dmuonc for another) or \"adamw\"");
  const std::set<std::string> convs = convWeightNames(model);
  std::ostringstream out;
  out << "# dmuonc manifest written from named_parameters(), in forward order.\n"
      << "[model]\nname = " << tomlString(options.modelName) << "\n";
  for (const auto &[name, t] : uniqueParams(model)) {
    out << "\n[[param]]\nname = " << tomlString(name) << "\nshape = [";
    const at::IntArrayRef sizes = t.sizes();
    for (size_t d = 0; d < sizes.size(); ++d)
      out << (d ? ", " : "") << sizes[d];
    out << "]\ndtype = \"" << tomlDtype(t.scalar_type()) << "\"\n";
    if (!t.requires_grad()) {
      out << "optimizer = \"adamw\"\nroute = \"host\"\n";
      continue;
    }
    if (options.optimizer == "adamw") {
      out << "optimizer = \"adamw\"\n";
      continue;
    }
    if (convs.count(name))
      out << "conv = true\n";
    out << fusedQkvSplit(name, sizes);
  }
  return out.str();
}

void runDmuonc(const std::string &dmuonc, const std::vector<std::string> &args) {
  std::vector<std::string> all = {dmuonc};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &a : all)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, dmuonc.c_str(), nullptr, nullptr, argv.data(), environ))
    throw std::runtime_error("cannot run '" + dmuonc + "': " + std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      throw std::runtime_error("waitpid on dmuonc: " + std::string(std::strerror(errno)));
  if (!WIFEXITED(status))
    throw std::runtime_error("dmuonc was killed by a signal");
  if (WEXITSTATUS(status) != 0)
    throw std::runtime_error("dmuonc failed (exit status " +
                             std::to_string(WEXITSTATUS(status)) + ")");
}

// ------------------------------------------------------------ ParamBridge

struct ParamBridge::Param {
  std::string name;
  int index = -1;       // in the plan: the views' key
  torch::Tensor tensor; // the module's own param (a leaf)
  int group = -1;       // -1: an AdamW param, replicated by the runtime
  // Muon params: the gradient accumulator is kept alive so that the post
  // hook stays on it (a leaf holds only a weak reference).
  std::shared_ptr<torch::autograd::Node> accumulator;
  torch::autograd::FunctionPostHook *hook = nullptr;

  // The one StorageImpl of the param and of every view of it (autograd's
  // saved tensors included) now reads `data`. Nothing is freed: the
  // runtime owns the memory.
  void pointAt(void *data) {
    tensor.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(
        c10::DataPtr(data, tensor.device()));
  }
};

namespace {

// The device layer of the C++ bridge: a param's storage is re-pointed at the
// runtime's memory on the param's own device, which must be the memory the
// runtime's backend keeps (host memory for MPI, the GPU's for NCCL, whose
// runtime the host made on its own stream).
void checkDevice(const std::string &name, c10::Device device, dmuon_backend_t backend) {
  if (device.is_cpu() && backend == DMUON_BACKEND_MPI)
    return;
  if (device.is_cuda() && backend == DMUON_BACKEND_NCCL)
    return;
  throw std::runtime_error(
      "param '" + name + "' is on " + device.str() + " but the runtime was made with the " +
      (backend == DMUON_BACKEND_NCCL ? "NCCL backend, which keeps params in GPU memory"
                                     : "MPI backend, which keeps params in host memory") +
      ": make the runtime with DMUON_BACKEND_NCCL (the host's ncclComm_t and stream) for "
      "CUDA params, DMUON_BACKEND_MPI for CPU ones");
}

} // namespace

ParamBridge::ParamBridge(dmuon::Runtime &rt, const dmuon::Plan &plan, torch::nn::Module &model)
    : rt_(rt) {
  const int groups = plan.numHookGroups();
  for (int g = 0; g < groups; ++g)
    groupNames_.push_back(plan.hookGroupName(g));
  groupParams_.resize(size_t(groups));
  phase_.assign(size_t(groups), Phase::Idle);
  pendingGrads_.assign(size_t(groups), 0);

  for (const auto &nm : model.named_modules("", /*include_self=*/false))
    modulePaths_.insert(nm.key());
  const auto named = uniqueParams(model);
  for (const auto &[name, t] : named) {
    checkDevice(name, t.device(), rt_.backend());
    if (t.device() != named.front().second.device())
      throw std::runtime_error("param '" + name + "' is on " + t.device().str() + " but '" +
                               named.front().first + "' is on " +
                               named.front().second.device().str() +
                               ": the bridge trains a model whose params are on one device");
  }
  if (int(named.size()) != plan.numParams())
    throw std::runtime_error("the plan has " + std::to_string(plan.numParams()) +
                             " params, the model " + std::to_string(named.size()) +
                             ": compile the plan from this model");
  for (const auto &[name, t] : named) {
    int index = -1;
    try {
      index = plan.findParam(name);
    } catch (const dmuon::Error &) {
      throw std::runtime_error("param '" + name + "' is not in the plan: compile the plan "
                               "from this model");
    }
    const dmuon_param_info_t info = plan.param(index);
    if (t.sizes() != at::IntArrayRef(info.shape, size_t(info.ndim)))
      throw std::runtime_error("param '" + name + "' has another shape in the plan");
    if (t.scalar_type() != torch::kFloat || info.dtype != DMUON_DTYPE_F32)
      throw std::runtime_error("param '" + name + "' is " +
                               std::string(c10::toString(t.scalar_type())) +
                               ": the bridge trains f32 params (fp32 masters); call "
                               "model->to(torch::kFloat) before making it");
    // A host-routed param (a frozen one) stays the module's own.
    if (plan.paramRoute(index).route == DMUON_ROUTE_HOST)
      continue;
    // The storage is re-pointed as a whole: it must be this param's alone.
    if (!t.is_contiguous() || t.storage_offset() != 0 ||
        t.storage().nbytes() != size_t(t.numel()) * sizeof(float))
      throw std::runtime_error("param '" + name + "' does not own its whole storage");
    // bind_param reads host memory on every backend.
    const torch::Tensor values = t.detach().to(torch::kCPU).contiguous();
    rt_.bindParam(name, values.data_ptr<float>(), t.numel());
    params_.push_back(Param{name, index, t, info.hook_group, nullptr, nullptr});
  }

  for (size_t i = 0; i < params_.size(); ++i) {
    Param &p = params_[i];
    // The module's own memory is freed here; from now on it is the runtime's.
    p.pointAt(nullptr);
    if (p.group < 0)
      continue;
    groupParams_[size_t(p.group)].push_back(i);
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    const int g = p.group;
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, g](const torch::autograd::variable_list &outputs,
                  const torch::autograd::variable_list &) {
          onGradAccumulated(g);
          return outputs;
        });
    p.hook = hook.get();
    p.accumulator->add_post_hook(std::move(hook));
  }
  beginStep();
}

ParamBridge::~ParamBridge() {
  // The model may outlive the bridge (and the runtime): take our hooks off
  // its accumulators and its params and gradients off the runtime's memory.
  for (Param &p : params_) {
    p.pointAt(nullptr);
    p.tensor.mutable_grad() = torch::Tensor();
    if (!p.accumulator)
      continue;
    auto &hooks = p.accumulator->post_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [&](const auto &h) { return h.get() == p.hook; }),
                hooks.end());
  }
}

int ParamBridge::hookGroup(const std::string &path) const {
  auto it = std::find(groupNames_.begin(), groupNames_.end(), path);
  return it == groupNames_.end() ? -1 : int(it - groupNames_.begin());
}

void ParamBridge::beginStep() {
  for (Param &p : params_) {
    if (p.group >= 0)
      continue;
    p.pointAt(rt_.paramView(p.index));
    p.tensor.mutable_grad() = gradTensor(rt_, p.index, p.tensor.sizes(), p.tensor.device());
  }
  std::fill(phase_.begin(), phase_.end(), Phase::Idle);
}

void ParamBridge::refreshGroup(int g) {
  for (size_t i : groupParams_[size_t(g)])
    params_[i].pointAt(viewOrNull(rt_, params_[i].index));
}

int ParamBridge::groupOfModule(const std::string &path, const char *call) const {
  const int g = hookGroup(path);
  if (g < 0 && path != kRootGroup && !modulePaths_.count(path)) {
    std::string groups;
    for (const std::string &n : groupNames_)
      groups += (groups.empty() ? "" : ", ") + n;
    throw std::invalid_argument(std::string(call) + "(\"" + path + "\"): the model has no " +
                                "module '" + path + "'; the plan's hook groups are: " + groups);
  }
  return g;
}

void ParamBridge::preForward(const std::string &path) {
  const int g = groupOfModule(path, "preForward");
  if (g < 0)
    return;
  {
    HookTimer timer(hookSeconds_);
    rt_.preForward(g);
  }
  refreshGroup(g);
  phase_[size_t(g)] = Phase::InForward;
}

torch::Tensor ParamBridge::postForward(const std::string &path, torch::Tensor out) {
  const int g = groupOfModule(path, "postForward");
  if (g < 0)
    return out;
  if (phase_[size_t(g)] != Phase::InForward)
    throw std::logic_error("postForward(\"" + path + "\") without preForward(\"" + path +
                           "\") in this forward");
  {
    HookTimer timer(hookSeconds_);
    rt_.postForward(g);
  }
  refreshGroup(g); // Z3: null until pre_backward; Z2: unchanged
  phase_[size_t(g)] = Phase::Forwarded;
  // Runs when the gradient of the module's output is complete, before any
  // of the module's own backward (under torch::NoGradGuard nothing runs).
  if (out.requires_grad())
    out.register_hook([this, g](const torch::Tensor &) { onPreBackward(g); });
  return out;
}

void ParamBridge::onPreBackward(int g) {
  {
    HookTimer timer(hookSeconds_);
    rt_.preBackward(g);
  }
  refreshGroup(g); // Z3: the new allocation; saved views follow the storage
  for (size_t i : groupParams_[size_t(g)])
    params_[i].tensor.mutable_grad() = gradTensor(rt_, params_[i].index, params_[i].tensor.sizes(),
                                                   params_[i].tensor.device());
  pendingGrads_[size_t(g)] = groupParams_[size_t(g)].size();
  phase_[size_t(g)] = Phase::InBackward;
}

void ParamBridge::onGradAccumulated(int g) {
  if (phase_[size_t(g)] != Phase::InBackward || --pendingGrads_[size_t(g)] > 0)
    return;
  {
    HookTimer timer(hookSeconds_);
    rt_.postBackward(g);
  }
  // The gradient buffer now belongs to the reduce and the packed buffer is
  // gone (both modes): no tensor may keep pointing at either.
  for (size_t i : groupParams_[size_t(g)])
    params_[i].tensor.mutable_grad() = torch::Tensor();
  refreshGroup(g);
  phase_[size_t(g)] = Phase::Done;
}

void ParamBridge::endBackward() {
  for (size_t g = 0; g < phase_.size(); ++g)
    if (phase_[g] == Phase::InForward)
      throw std::logic_error("preForward(\"" + groupNames_[g] + "\") had no postForward(\"" +
                             groupNames_[g] + "\", out): call it after the module's forward, " +
                             "with its output");
  for (int g = int(phase_.size()) - 1; g >= 0; --g) {
    if (phase_[size_t(g)] == Phase::Forwarded)
      onPreBackward(g); // its output did not reach the loss
    if (phase_[size_t(g)] == Phase::InBackward) {
      pendingGrads_[size_t(g)] = 1;
      onGradAccumulated(g);
    }
  }
}

void ParamBridge::abandonStep() {
  rt_.abandonStep();
  for (Param &p : params_) {
    p.tensor.mutable_grad() = torch::Tensor();
    if (p.group >= 0)
      p.pointAt(nullptr);
  }
  std::fill(phase_.begin(), phase_.end(), Phase::Idle);
  std::fill(pendingGrads_.begin(), pendingGrads_.end(), size_t(0));
}

void ParamBridge::gatherInto(torch::nn::Module &copy) {
  torch::NoGradGuard noGrad;
  auto named = copy.named_parameters();
  for (const Param &p : params_) {
    torch::Tensor *dst = named.find(p.name);
    if (!dst || dst->scalar_type() != torch::kFloat || dst->sizes() != p.tensor.sizes())
      throw std::runtime_error("gatherInto: the copy has no f32 param '" + p.name +
                               "' of the same shape");
    // gather_param writes host memory; the copy may be on any device.
    torch::Tensor values = torch::empty(dst->sizes(), torch::kFloat);
    rt_.gatherParam(p.name, values.data_ptr<float>(), values.numel());
    dst->copy_(values);
  }
}

} // namespace dmuon_torch
