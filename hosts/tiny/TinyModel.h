// A tiny residual MLP for the example trainer and the distributed tests:
// forward and backward in plain C++ with OpenBLAS (cblas_sgemm), fp32.
//
//   h_0     = x · embedᵀ                                  embed.weight [D, I]
//   for l in 0..L-1 (layers.l):
//     n     = rmsnorm(h_l) ⊙ norm.weight                  norm.weight  [D]
//     a     = n · fc1ᵀ + fc1.bias                         fc1.weight   [H, D]
//     o     = silu(a) · fc2ᵀ + fc2.bias                   fc2.weight   [D, H]
//     h_l+1 = h_l + o
//   y       = h_L · headᵀ                                 head.weight  [O, D]
//   loss    = mean over batch and outputs of (y − t)²
//
// Targets t come from a fixed random teacher network, and inputs x from a
// counter-based generator, so any rank can produce any slice of any step's
// global batch on its own and all ranks agree on the data.
//
// The model never owns its params: it asks a ParamAccess for each param's
// values and gradient buffer by name, and calls the access's hooks around
// each module's forward and backward. A single-process reference hands
// out plain arrays; the trainer hands out libdmuon's views and runs the
// runtime's hooks.
#ifndef DMUON_HOSTS_TINY_TINYMODEL_H
#define DMUON_HOSTS_TINY_TINYMODEL_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tiny {

struct Config {
  int64_t inDim = 16;   // I
  int64_t dim = 32;     // D
  int64_t hidden = 64;  // H
  int64_t outDim = 8;   // O
  int64_t layers = 4;   // L
  int64_t globalBatch = 64;
};

// The model's modules, in forward order, by index: the input projection
// `embed` (kEmbedModule), layers.l (l in 0..L-1), the output `head` (L).
inline constexpr int kEmbedModule = -1;
inline int headModule(const Config &cfg) { return static_cast<int>(cfg.layers); }

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int layer = -1; // its module's index (kEmbedModule, layers.N's N, headModule)
};

// Every param in forward (model) order, as in tiny.toml.
std::vector<ParamSpec> paramSpecs(const Config &cfg);

// Deterministic initial values of one param (the same on every rank).
std::vector<float> initParam(const Config &cfg, const ParamSpec &spec, uint64_t seed);

// Deterministic synthetic data: rows [first, first+count) of the global batch
// of step `step`. x is count x I, t is count x O, both row-major.
class Data {
public:
  Data(const Config &cfg, uint64_t seed);
  void batch(int64_t step, int64_t first, int64_t count, float *x, float *t) const;

private:
  Config cfg_;
  uint64_t seed_;
  std::vector<float> w1_, b1_, w2_; // teacher: t = w2 · tanh(w1 · x + b1)
  int64_t teacherHidden_ = 32;
};

// What the model reads params from and accumulates gradients into.
class ParamAccess {
public:
  virtual ~ParamAccess() = default;
  virtual const float *param(const std::string &name) = 0;
  // Accumulated into (+=); the caller zeroes between steps.
  virtual float *grad(const std::string &name) = 0;
  // Hooks around module l's forward and backward (kEmbedModule, layers.l
  // for l in 0..L-1, headModule).
  virtual void beforeLayerForward(int) {}
  virtual void afterLayerForward(int) {}
  virtual void beforeLayerBackward(int) {}
  virtual void afterLayerBackward(int) {}
};

class Model {
public:
  Model(const Config &cfg, int64_t batch);

  // One forward and backward pass over a batch of `batch` rows; returns the
  // mean loss over the batch and accumulates the gradient of that mean into
  // access.grad(...). Layer params are read only between the layer's hooks.
  // One of `microBatches` micro-batches of a step: the gradient is of the
  // mean over all their rows (the loss scaled by 1/microBatches, as a torch
  // host scales it for gradient accumulation).
  float forwardBackward(ParamAccess &access, const float *x, const float *t,
                        int64_t microBatches = 1);

  // Forward only (loss of a batch).
  float loss(ParamAccess &access, const float *x, const float *t);

  // A pipeline stage's share of one micro-batch: the contiguous run of
  // modules first..last (kEmbedModule..headModule) only, with the same
  // arithmetic as forwardBackward, so a pipelined host computes what one
  // process computes. `in` is x when the run starts at embed, else the
  // residual stream h_first [batch, D] from the stage before; without the
  // head the output is hidden(last + 1), with it the loss is returned (0
  // otherwise) and t is read; microBatches scales the gradient as in
  // forwardBackward. One Model holds one micro-batch's activations from its
  // forward to its backward.
  float forwardModules(ParamAccess &access, int first, int last, const float *in, const float *t,
                       int64_t microBatches = 1);
  // Backward of the same run: dOut is d loss / d h_last+1 [batch, D] from the
  // stage after (unread when the run ends with the head), x the input (read
  // when it starts at embed). Accumulates the params' gradients and returns
  // d loss / d h_first (valid until the next call), nullptr from embed.
  const float *backwardModules(ParamAccess &access, int first, int last, const float *x,
                               const float *dOut);
  // The residual stream h_l [batch, D] (l in 0..L) of the last forward.
  const float *hidden(int l) const;

  const Config &config() const { return cfg_; }
  int64_t batch() const { return batch_; }

private:
  float forward(ParamAccess &access, const float *x, const float *t, int64_t microBatches);
  void checkRange(int first, int last) const;

  Config cfg_;
  int64_t batch_;
  // Activations kept for backward, per layer.
  std::vector<std::vector<float>> h_;   // L+1 residual streams [B, D]
  std::vector<std::vector<float>> rms_; // L: 1/rms per row [B]
  std::vector<std::vector<float>> n_;   // L: normalized input [B, D]
  std::vector<std::vector<float>> a_;   // L: fc1 pre-activation [B, H]
  std::vector<std::vector<float>> z_;   // L: silu(a) [B, H]
  std::vector<float> y_, dy_, dh_, dn_, da_, dz_;
};

// A plain in-memory param store with gradients: the single-process reference.
class ParamStore : public ParamAccess {
public:
  ParamStore(const Config &cfg, uint64_t seed);
  const float *param(const std::string &name) override;
  float *grad(const std::string &name) override;
  std::vector<float> &values(const std::string &name) { return values_.at(name); }
  std::vector<float> &grads(const std::string &name) { return grads_.at(name); }
  void zeroGrads();
  const std::vector<ParamSpec> &specs() const { return specs_; }

private:
  std::vector<ParamSpec> specs_;
  std::map<std::string, std::vector<float>> values_, grads_;
};

} // namespace tiny

#endif
