#include "TinyModel.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tiny {
namespace {

// ------------------------------------------------------- deterministic RNG
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A stream of standard normals from a 64-bit key (Box-Muller on a counter).
class Normal {
public:
  explicit Normal(uint64_t key) : state_(splitmix64(key)) {}
  float next() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    double th = 6.283185307179586 * u2;
    spare_ = static_cast<float>(r * std::sin(th));
    haveSpare_ = true;
    return static_cast<float>(r * std::cos(th));
  }

private:
  double uniform() { // (0, 1]
    state_ = splitmix64(state_);
    return (static_cast<double>(state_ >> 11) + 1.0) * 0x1.0p-53;
  }
  uint64_t state_;
  float spare_ = 0;
  bool haveSpare_ = false;
};

void fillNormal(std::vector<float> &v, uint64_t key, float std) {
  Normal n(key);
  for (float &x : v)
    x = std * n.next();
}

// C = alpha * op(A) * op(B) + beta * C, row-major.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

constexpr float kRmsEps = 1e-6f;

struct LayerNames {
  std::string norm, fc1w, fc1b, fc2w, fc2b;
};

LayerNames layerNames(int64_t l) {
  std::string p = "layers." + std::to_string(l) + ".";
  return {p + "norm.weight", p + "fc1.weight", p + "fc1.bias", p + "fc2.weight", p + "fc2.bias"};
}

} // namespace

std::vector<ParamSpec> paramSpecs(const Config &cfg) {
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer) {
    int64_t numel = 1;
    for (int64_t d : shape)
      numel *= d;
    specs.push_back({std::move(name), std::move(shape), numel, layer});
  };
  add("embed.weight", {cfg.dim, cfg.inDim}, kEmbedModule);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    LayerNames n = layerNames(l);
    int li = static_cast<int>(l);
    add(n.norm, {cfg.dim}, li);
    add(n.fc1w, {cfg.hidden, cfg.dim}, li);
    add(n.fc1b, {cfg.hidden}, li);
    add(n.fc2w, {cfg.dim, cfg.hidden}, li);
    add(n.fc2b, {cfg.dim}, li);
  }
  add("head.weight", {cfg.outDim, cfg.dim}, headModule(cfg));
  return specs;
}

std::vector<float> initParam(const Config &cfg, const ParamSpec &spec, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(spec.numel), 0.0f);
  uint64_t key = splitmix64(seed ^ 0x5eed5eed5eedULL) ^ fnv1a(spec.name);
  const std::string &n = spec.name;
  auto endsWith = [&](const char *suffix) {
    std::string s(suffix);
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  if (n == "embed.weight")
    fillNormal(v, key, 1.0f / std::sqrt(static_cast<float>(cfg.inDim)));
  else if (n == "head.weight")
    fillNormal(v, key, 0.5f / std::sqrt(static_cast<float>(cfg.dim)));
  else if (endsWith("norm.weight"))
    std::fill(v.begin(), v.end(), 1.0f);
  else if (endsWith("fc1.weight"))
    fillNormal(v, key, 1.0f / std::sqrt(static_cast<float>(cfg.dim)));
  else if (endsWith("fc2.weight"))
    fillNormal(v, key, 0.5f / std::sqrt(static_cast<float>(cfg.hidden)));
  // biases start at zero
  return v;
}

// ------------------------------------------------------------------- data
Data::Data(const Config &cfg, uint64_t seed) : cfg_(cfg), seed_(seed) {
  int64_t th = teacherHidden_;
  w1_.resize(static_cast<size_t>(th * cfg.inDim));
  b1_.resize(static_cast<size_t>(th));
  w2_.resize(static_cast<size_t>(cfg.outDim * th));
  uint64_t k = splitmix64(seed ^ 0x7eac7e7eac7eULL);
  fillNormal(w1_, k + 1, 0.75f / std::sqrt(static_cast<float>(cfg.inDim)));
  fillNormal(b1_, k + 2, 0.5f);
  fillNormal(w2_, k + 3, 2.0f / std::sqrt(static_cast<float>(th)));
}

void Data::batch(int64_t step, int64_t first, int64_t count, float *x, float *t) const {
  const int64_t in = cfg_.inDim, out = cfg_.outDim, th = teacherHidden_;
  std::vector<float> hid(static_cast<size_t>(th));
  for (int64_t r = 0; r < count; ++r) {
    uint64_t key = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(step) * 0x1000003ULL +
                                                 static_cast<uint64_t>(first + r)));
    Normal n(key);
    float *xr = x + r * in;
    for (int64_t i = 0; i < in; ++i)
      xr[i] = n.next();
    for (int64_t j = 0; j < th; ++j) {
      double s = b1_[static_cast<size_t>(j)];
      for (int64_t i = 0; i < in; ++i)
        s += static_cast<double>(w1_[static_cast<size_t>(j * in + i)]) * xr[i];
      hid[static_cast<size_t>(j)] = static_cast<float>(std::tanh(s));
    }
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t j = 0; j < th; ++j)
        s += static_cast<double>(w2_[static_cast<size_t>(o * th + j)]) * hid[static_cast<size_t>(j)];
      t[r * out + o] = static_cast<float>(s);
    }
  }
}

// ------------------------------------------------------------------ model
Model::Model(const Config &cfg, int64_t batch) : cfg_(cfg), batch_(batch) {
  if (batch <= 0)
    throw std::invalid_argument("tiny::Model: batch must be positive");
  const size_t B = static_cast<size_t>(batch), D = static_cast<size_t>(cfg.dim),
               H = static_cast<size_t>(cfg.hidden), O = static_cast<size_t>(cfg.outDim),
               L = static_cast<size_t>(cfg.layers);
  h_.assign(L + 1, std::vector<float>(B * D));
  rms_.assign(L, std::vector<float>(B));
  n_.assign(L, std::vector<float>(B * D));
  a_.assign(L, std::vector<float>(B * H));
  z_.assign(L, std::vector<float>(B * H));
  y_.resize(B * O);
  dy_.resize(B * O);
  dh_.resize(B * D);
  dn_.resize(B * D);
  da_.resize(B * H);
  dz_.resize(B * H);
}

float Model::forward(ParamAccess &access, const float *x, const float *t,
                     int64_t microBatches) {
  return forwardModules(access, kEmbedModule, headModule(cfg_), x, t, microBatches);
}

void Model::checkRange(int first, int last) const {
  if (first < kEmbedModule || last > headModule(cfg_) || first > last)
    throw std::invalid_argument("tiny::Model: modules " + std::to_string(first) + ".." +
                                std::to_string(last) + " are not a run of the model's");
}

const float *Model::hidden(int l) const {
  if (l < 0 || l > cfg_.layers)
    throw std::out_of_range("tiny::Model: no residual stream h_" + std::to_string(l));
  return h_[static_cast<size_t>(l)].data();
}

float Model::forwardModules(ParamAccess &access, int first, int last, const float *in,
                            const float *t, int64_t microBatches) {
  checkRange(first, last);
  if (microBatches < 1)
    throw std::invalid_argument("tiny::Model: microBatches must be positive");
  const int64_t B = batch_, I = cfg_.inDim, D = cfg_.dim, H = cfg_.hidden, O = cfg_.outDim;
  if (first == kEmbedModule) {
    access.beforeLayerForward(kEmbedModule);
    gemm(false, true, B, D, I, in, I, access.param("embed.weight"), I, 0.0f, h_[0].data(), D);
    access.afterLayerForward(kEmbedModule);
  } else {
    // The stage's input: the residual stream the stage before computed.
    std::copy(in, in + B * D, h_[static_cast<size_t>(first)].begin());
  }

  const int64_t lastLayer = std::min<int64_t>(last, cfg_.layers - 1);
  for (int64_t l = std::max(first, 0); l <= lastLayer; ++l) {
    const LayerNames names = layerNames(l);
    const int li = static_cast<int>(l);
    access.beforeLayerForward(li);
    const float *g = access.param(names.norm);
    const float *w1 = access.param(names.fc1w);
    const float *b1 = access.param(names.fc1b);
    const float *w2 = access.param(names.fc2w);
    const float *b2 = access.param(names.fc2b);
    const float *h = h_[l].data();
    float *n = n_[l].data(), *a = a_[l].data(), *z = z_[l].data(), *r = rms_[l].data();
    for (int64_t b = 0; b < B; ++b) {
      double ss = 0;
      for (int64_t j = 0; j < D; ++j)
        ss += static_cast<double>(h[b * D + j]) * h[b * D + j];
      float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(D)) + kRmsEps);
      r[b] = inv;
      for (int64_t j = 0; j < D; ++j)
        n[b * D + j] = h[b * D + j] * inv * g[j];
    }
    gemm(false, true, B, H, D, n, D, w1, D, 0.0f, a, H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        float v = a[b * H + j] + b1[j];
        a[b * H + j] = v;
        z[b * H + j] = v * sigmoid(v);
      }
    float *hn = h_[l + 1].data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < D; ++j)
        hn[b * D + j] = h[b * D + j] + b2[j];
    gemm(false, true, B, D, H, z, H, w2, H, 1.0f, hn, D);
    access.afterLayerForward(li);
  }

  const int head = headModule(cfg_);
  if (last != head)
    return 0.0f;
  access.beforeLayerForward(head);
  gemm(false, true, B, O, D, h_[static_cast<size_t>(cfg_.layers)].data(), D,
       access.param("head.weight"), D, 0.0f, y_.data(), O);
  access.afterLayerForward(head);
  double loss = 0;
  // d(loss)/dy of the mean over every micro-batch's rows: the host's 1/k.
  const float scale = 2.0f / static_cast<float>(B * microBatches * O);
  for (int64_t i = 0; i < B * O; ++i) {
    float d = y_[static_cast<size_t>(i)] - t[i];
    loss += static_cast<double>(d) * d;
    dy_[static_cast<size_t>(i)] = scale * d;
  }
  return static_cast<float>(loss / static_cast<double>(B * O));
}

float Model::loss(ParamAccess &access, const float *x, const float *t) {
  return forward(access, x, t, 1);
}

float Model::forwardBackward(ParamAccess &access, const float *x, const float *t,
                             int64_t microBatches) {
  if (microBatches < 1)
    throw std::invalid_argument("tiny::Model: microBatches must be positive");
  const float loss = forward(access, x, t, microBatches);
  backwardModules(access, kEmbedModule, headModule(cfg_), x, nullptr);
  return loss;
}

const float *Model::backwardModules(ParamAccess &access, int first, int last, const float *x,
                                    const float *dOut) {
  checkRange(first, last);
  const int64_t B = batch_, I = cfg_.inDim, D = cfg_.dim, H = cfg_.hidden, O = cfg_.outDim;
  const size_t L = static_cast<size_t>(cfg_.layers);

  const int head = headModule(cfg_);
  if (last == head) {
    // head: y = h_L · headᵀ
    access.beforeLayerBackward(head);
    gemm(true, false, O, D, B, dy_.data(), O, h_[L].data(), D, 1.0f, access.grad("head.weight"), D);
    gemm(false, false, B, D, O, dy_.data(), O, access.param("head.weight"), D, 0.0f, dh_.data(), D);
    access.afterLayerBackward(head);
  } else {
    // The gradient of the stage's output, from the stage after.
    std::copy(dOut, dOut + B * D, dh_.begin());
  }

  for (int64_t l = std::min<int64_t>(last, cfg_.layers - 1); l >= std::max(first, 0); --l) {
    const LayerNames names = layerNames(l);
    const int li = static_cast<int>(l);
    access.beforeLayerBackward(li);
    const float *g = access.param(names.norm);
    const float *w1 = access.param(names.fc1w);
    const float *w2 = access.param(names.fc2w);
    float *dg = access.grad(names.norm);
    float *dw1 = access.grad(names.fc1w);
    float *db1 = access.grad(names.fc1b);
    float *dw2 = access.grad(names.fc2w);
    float *db2 = access.grad(names.fc2b);
    const float *h = h_[static_cast<size_t>(l)].data();
    const float *n = n_[static_cast<size_t>(l)].data();
    const float *a = a_[static_cast<size_t>(l)].data();
    const float *z = z_[static_cast<size_t>(l)].data();
    const float *r = rms_[static_cast<size_t>(l)].data();
    float *dh = dh_.data(), *dn = dn_.data(), *da = da_.data(), *dz = dz_.data();

    // o = z · fc2ᵀ + b2, with do = dh (the residual passes dh through)
    gemm(true, false, D, H, B, dh, D, z, H, 1.0f, dw2, H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < D; ++j)
        db2[j] += dh[b * D + j];
    gemm(false, false, B, H, D, dh, D, w2, H, 0.0f, dz, H);
    // z = silu(a)
    for (int64_t i = 0; i < B * H; ++i) {
      float s = sigmoid(a[i]);
      da[i] = dz[i] * s * (1.0f + a[i] * (1.0f - s));
    }
    // a = n · fc1ᵀ + b1
    gemm(true, false, H, D, B, da, H, n, D, 1.0f, dw1, D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j)
        db1[j] += da[b * H + j];
    gemm(false, false, B, D, H, da, H, w1, D, 0.0f, dn, D);
    // n = u ⊙ g with u = h · r: dh += r (du − u · mean(du ⊙ u)), du = dn ⊙ g
    for (int64_t b = 0; b < B; ++b) {
      double dot = 0;
      for (int64_t j = 0; j < D; ++j) {
        float u = h[b * D + j] * r[b];
        float du = dn[b * D + j] * g[j];
        dg[j] += dn[b * D + j] * u;
        dot += static_cast<double>(du) * u;
      }
      float mean = static_cast<float>(dot / static_cast<double>(D));
      for (int64_t j = 0; j < D; ++j) {
        float u = h[b * D + j] * r[b];
        float du = dn[b * D + j] * g[j];
        dh[b * D + j] += r[b] * (du - u * mean);
      }
    }
    access.afterLayerBackward(li);
  }

  if (first != kEmbedModule)
    return dh_.data();
  // embed: h_0 = x · embedᵀ
  access.beforeLayerBackward(kEmbedModule);
  gemm(true, false, D, I, B, dh_.data(), D, x, I, 1.0f, access.grad("embed.weight"), I);
  access.afterLayerBackward(kEmbedModule);
  return nullptr;
}

// ------------------------------------------------------------ param store
ParamStore::ParamStore(const Config &cfg, uint64_t seed) : specs_(paramSpecs(cfg)) {
  for (const ParamSpec &s : specs_) {
    values_[s.name] = initParam(cfg, s, seed);
    grads_[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
  }
}

const float *ParamStore::param(const std::string &name) {
  auto it = values_.find(name);
  if (it == values_.end())
    throw std::out_of_range("tiny::ParamStore: no param '" + name + "'");
  return it->second.data();
}

float *ParamStore::grad(const std::string &name) {
  auto it = grads_.find(name);
  if (it == grads_.end())
    throw std::out_of_range("tiny::ParamStore: no param '" + name + "'");
  return it->second.data();
}

void ParamStore::zeroGrads() {
  for (auto &[name, g] : grads_)
    std::fill(g.begin(), g.end(), 0.0f);
}

} // namespace tiny
