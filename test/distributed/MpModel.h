// The model of the model-parallel MPI tests (mp_test.cpp, mp_checkpoint_test.cpp)
// in plain C++, its single-process reference, and the mesh as the host sees
// it (the host's side of model parallelism: MpHost.h). The model and the
// simulation are described at the top of mp_test.cpp.
#ifndef DMUON_TEST_DISTRIBUTED_MPMODEL_H
#define DMUON_TEST_DISTRIBUTED_MPMODEL_H

#include "dmuon/dmuon.h"
#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"

#include "MpShards.h"
#include "MpiCheck.h"
#include "ReferenceHyper.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpmodel {

using reference::adamwHyper;
using reference::muonHyper;

inline constexpr uint64_t kSeed = 11;

// ------------------------------------------------------------------ model
struct Config {
  int64_t in = 16, dim = 32, hidden = 64, out = 8, experts = 4, expertHidden = 16, layers = 2;
  int64_t globalBatch = 64;
  bool headBias = false;
};

// mp-<layout>.toml's sizes: vocab has a GPT-2-sized output (50257, uneven
// over tp = 2) with a bias, 5 experts (3 + 2 over tp) and a narrower model.
inline Config configFor(const std::string &layout) {
  Config c;
  if (layout == "vocab") {
    c.dim = 16;
    c.hidden = 32;
    c.out = 50257;
    c.experts = 5;
    c.headBias = true;
  }
  return c;
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int shardDim = -1; // tensor dim sharded over the model-parallel mesh dim, -1 if none
  int splitFactor = 1; // k of a StridedShard(shardDim, k); 1 for a Shard
};

inline std::vector<Spec> modelSpecs(const Config &c, const std::string &layout) {
  const bool vocab = layout == "vocab", tp = layout == "tp" || vocab, cp = layout == "cp";
  const bool strided = layout == "ep-strided"; // experts and head StridedShard(0, 2) on ep
  std::vector<Spec> s;
  s.push_back({"embed.weight", {c.dim, c.in}, 1, -1, 1});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    s.push_back({p + "norm.weight", {c.dim}, 1, -1, 1});
    s.push_back({p + "up.weight", {c.hidden, c.dim}, 1, tp ? 0 : -1, 1});
    s.push_back({p + "down.weight", {c.dim, c.hidden}, 1, tp ? 1 : -1, 1});
  }
  s.push_back({"moe.experts.w", {c.experts, c.expertHidden, c.dim}, 1, cp ? -1 : 0,
               strided ? 2 : 1});
  s.push_back({"head.weight", {c.out, c.dim}, 1, vocab || strided ? 0 : -1, strided ? 2 : 1});
  if (c.headBias)
    s.push_back({"head.bias", {c.out}, 1, vocab ? 0 : -1, 1});
  for (Spec &x : s)
    for (int64_t d : x.shape)
      x.numel *= d;
  return s;
}

inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from a key.
inline float uniform(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = splitmix(splitmix(splitmix(a) ^ b) ^ c);
  return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

inline uint64_t nameKey(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s)
    h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

inline std::vector<float> initParam(const Spec &s) {
  std::vector<float> v(static_cast<size_t>(s.numel));
  const uint64_t key = nameKey(s.name) ^ kSeed;
  const bool norm = s.shape.size() == 1;
  const float scale = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
  for (int64_t i = 0; i < s.numel; ++i) {
    const float u = uniform(key, 1, static_cast<uint64_t>(i));
    v[static_cast<size_t>(i)] = norm ? 1.0f + scale * u : scale * u;
  }
  return v;
}

// Rows [first, first + count) of step `step`'s global batch: x uniform, t
// from a fixed random teacher t = T2 · tanh(T1 · x).
inline void makeBatch(const Config &c, int64_t step, int64_t first, int64_t count,
                      std::vector<float> &x, std::vector<float> &t) {
  const int64_t th = 24;
  x.assign(static_cast<size_t>(count * c.in), 0.0f);
  t.assign(static_cast<size_t>(count * c.out), 0.0f);
  // The teacher's output weights, drawn once per output size (a vocabulary
  // of them would otherwise dominate the test's time).
  static std::map<int64_t, std::vector<float>> teachers;
  std::vector<float> &T2 = teachers[c.out];
  if (T2.empty()) {
    T2.resize(static_cast<size_t>(c.out * th));
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t j = 0; j < th; ++j)
        T2[static_cast<size_t>(o * th + j)] =
            uniform(kSeed ^ 0x7ea2, static_cast<uint64_t>(o), static_cast<uint64_t>(j));
  }
  std::vector<float> hid(static_cast<size_t>(th));
  for (int64_t b = 0; b < count; ++b) {
    const uint64_t row = static_cast<uint64_t>(first + b);
    float *xb = &x[static_cast<size_t>(b * c.in)];
    for (int64_t i = 0; i < c.in; ++i)
      xb[i] = uniform(kSeed ^ 0xda7a, static_cast<uint64_t>(step) * 100003u + row,
                      static_cast<uint64_t>(i));
    for (int64_t j = 0; j < th; ++j) {
      float a = 0;
      for (int64_t i = 0; i < c.in; ++i)
        a += uniform(kSeed ^ 0x7ea1, static_cast<uint64_t>(j), static_cast<uint64_t>(i)) * xb[i];
      hid[static_cast<size_t>(j)] = std::tanh(a);
    }
    for (int64_t o = 0; o < c.out; ++o) {
      float a = 0;
      for (int64_t j = 0; j < th; ++j)
        a += T2[static_cast<size_t>(o * th + j)] * hid[static_cast<size_t>(j)];
      t[static_cast<size_t>(b * c.out + o)] = 0.5f * a;
    }
  }
}

using Tensors = std::map<std::string, std::vector<float>>;

inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

// y = W x for a row-major W [m, n].
inline void matvec(const float *W, const float *x, float *y, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j)
      s += W[i * n + j] * x[j];
    y[i] = s;
  }
}
// y += Wᵀ x for W [m, n], x [m], y [n].
inline void matvecTAdd(const float *W, const float *x, float *y, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      y[j] += W[i * n + j] * x[i];
}
// dW += a ⊗ b for dW [m, n].
inline void outerAdd(float *dW, const float *a, const float *b, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      dW[i * n + j] += a[i] * b[j];
}

// One forward and backward over `count` rows whose global indices start at
// `first` (for the router); returns the mean loss of these rows and adds the
// gradient of that mean into `g` (full tensors, pre-sized).
inline double forwardBackward(const Config &c, const Tensors &p, Tensors &g, const float *x,
                              const float *t, int64_t count, int64_t first) {
  const int64_t D = c.dim, H = c.hidden, F = c.expertHidden, L = c.layers;
  const float eps = 1e-6f;
  std::vector<std::vector<float>> hs(static_cast<size_t>(L + 1), std::vector<float>(D));
  std::vector<std::vector<float>> nrm(static_cast<size_t>(L), std::vector<float>(D)),
      nn(static_cast<size_t>(L), std::vector<float>(D)),
      as(static_cast<size_t>(L), std::vector<float>(H)),
      zs(static_cast<size_t>(L), std::vector<float>(H));
  std::vector<float> rinv(static_cast<size_t>(L));
  std::vector<float> hm(D), a2(F), z2(F), y(c.out), dy(c.out), dh(D), dz(H), da(H), dn(D), dz2(F),
      da2(F), dnrm(D);
  double loss = 0;
  const float *embed = p.at("embed.weight").data();
  const float *head = p.at("head.weight").data();
  const float *bias = c.headBias ? p.at("head.bias").data() : nullptr;
  const float *experts = p.at("moe.experts.w").data();
  for (int64_t b = 0; b < count; ++b) {
    const float *xb = x + b * c.in;
    const float *tb = t + b * c.out;
    matvec(embed, xb, hs[0].data(), D, c.in);
    for (int64_t l = 0; l < L; ++l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      const float *norm = p.at(pre + "norm.weight").data();
      const float *up = p.at(pre + "up.weight").data();
      const float *down = p.at(pre + "down.weight").data();
      const std::vector<float> &h = hs[static_cast<size_t>(l)];
      float ms = 0;
      for (int64_t d = 0; d < D; ++d)
        ms += h[d] * h[d];
      const float r = 1.0f / std::sqrt(ms / static_cast<float>(D) + eps);
      rinv[static_cast<size_t>(l)] = r;
      for (int64_t d = 0; d < D; ++d) {
        nrm[l][d] = h[d] * r;
        nn[l][d] = nrm[l][d] * norm[d];
      }
      matvec(up, nn[l].data(), as[l].data(), H, D);
      for (int64_t k = 0; k < H; ++k)
        zs[l][k] = as[l][k] * sigmoid(as[l][k]);
      std::vector<float> &hn = hs[static_cast<size_t>(l + 1)];
      matvec(down, zs[l].data(), hn.data(), D, H);
      for (int64_t d = 0; d < D; ++d)
        hn[d] += h[d];
    }
    // MoE: the fixed router sends global row i to expert i mod E.
    const int64_t e = (first + b) % c.experts;
    const float *W = experts + e * F * D;
    const std::vector<float> &hL = hs[static_cast<size_t>(L)];
    matvec(W, hL.data(), a2.data(), F, D);
    for (int64_t f = 0; f < F; ++f)
      z2[f] = a2[f] * sigmoid(a2[f]);
    hm = hL;
    matvecTAdd(W, z2.data(), hm.data(), F, D);
    matvec(head, hm.data(), y.data(), c.out, D);
    if (bias)
      for (int64_t o = 0; o < c.out; ++o)
        y[o] += bias[o];
    for (int64_t o = 0; o < c.out; ++o) {
      const float diff = y[o] - tb[o];
      loss += static_cast<double>(diff) * diff;
      dy[o] = 2.0f * diff / static_cast<float>(count * c.out);
    }
    // Backward.
    outerAdd(g.at("head.weight").data(), dy.data(), hm.data(), c.out, D);
    if (bias) {
      float *dbias = g.at("head.bias").data();
      for (int64_t o = 0; o < c.out; ++o)
        dbias[o] += dy[o];
    }
    std::fill(dh.begin(), dh.end(), 0.0f);
    matvecTAdd(head, dy.data(), dh.data(), c.out, D);
    float *dW = g.at("moe.experts.w").data() + e * F * D;
    outerAdd(dW, z2.data(), dh.data(), F, D); // from h += Wᵀ z2
    matvec(W, dh.data(), dz2.data(), F, D);
    for (int64_t f = 0; f < F; ++f) {
      const float s = sigmoid(a2[f]);
      da2[f] = dz2[f] * s * (1.0f + a2[f] * (1.0f - s));
    }
    outerAdd(dW, da2.data(), hL.data(), F, D); // from a2 = W h
    matvecTAdd(W, da2.data(), dh.data(), F, D);
    for (int64_t l = L - 1; l >= 0; --l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      const float *norm = p.at(pre + "norm.weight").data();
      const float *up = p.at(pre + "up.weight").data();
      const float *down = p.at(pre + "down.weight").data();
      outerAdd(g.at(pre + "down.weight").data(), dh.data(), zs[l].data(), D, H);
      std::fill(dz.begin(), dz.end(), 0.0f);
      matvecTAdd(down, dh.data(), dz.data(), D, H);
      for (int64_t k = 0; k < H; ++k) {
        const float s = sigmoid(as[l][k]);
        da[k] = dz[k] * s * (1.0f + as[l][k] * (1.0f - s));
      }
      outerAdd(g.at(pre + "up.weight").data(), da.data(), nn[l].data(), H, D);
      std::fill(dn.begin(), dn.end(), 0.0f);
      matvecTAdd(up, da.data(), dn.data(), H, D);
      float *dnorm = g.at(pre + "norm.weight").data();
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        dnorm[d] += dn[d] * nrm[l][d];
        dnrm[d] = dn[d] * norm[d];
        dot += dnrm[d] * nrm[l][d];
      }
      const float r = rinv[static_cast<size_t>(l)];
      const float mean = dot / static_cast<float>(D);
      for (int64_t d = 0; d < D; ++d)
        dh[d] += r * (dnrm[d] - nrm[l][d] * mean); // residual + rmsnorm
    }
    outerAdd(g.at("embed.weight").data(), dh.data(), xb, D, c.in);
  }
  return loss / static_cast<double>(count * c.out);
}

// --------------------------------------------------------------- the mesh
struct Topology {
  dmuon_mesh_info_t mesh{};
  std::vector<int> coord; // this rank's, row-major over the mesh dims
  int shard = 0, replicate = 0, G = 1, R = 1;
  int mpDim = -1, mpSize = 1, mp = 0; // the model-parallel dim, its size, my coordinate
  bool mpCarriesData = false;         // its coordinates see different tokens (ep, cp)
  std::string mpName = "none";
  MPI_Comm mpComm = MPI_COMM_NULL; // ranks differing only in the mp coordinate, ordered by it
  std::string text;

  int rankOf(const std::vector<int> &c) const {
    int r = 0;
    for (int d = 0; d < mesh.ndim; ++d)
      r = r * mesh.dim_sizes[d] + c[static_cast<size_t>(d)];
    return r;
  }
  std::vector<int> coordOf(int rank) const {
    std::vector<int> c(static_cast<size_t>(mesh.ndim));
    for (int d = mesh.ndim - 1; d >= 0; --d) {
      c[static_cast<size_t>(d)] = rank % mesh.dim_sizes[d];
      rank /= mesh.dim_sizes[d];
    }
    return c;
  }
  // The rank at (shard, replicate) with model-parallel coordinate `m`.
  int rankAt(int s, int r, int m) const {
    std::vector<int> c(static_cast<size_t>(mesh.ndim), 0);
    if (mesh.shard_dim >= 0)
      c[static_cast<size_t>(mesh.shard_dim)] = s;
    if (mesh.replicate_dim >= 0)
      c[static_cast<size_t>(mesh.replicate_dim)] = r;
    if (mpDim >= 0)
      c[static_cast<size_t>(mpDim)] = m;
    return rankOf(c);
  }
  int mpOf(int rank) const { return mpDim >= 0 ? coordOf(rank)[static_cast<size_t>(mpDim)] : 0; }
  int shardOf(int rank) const {
    return mesh.shard_dim >= 0 ? coordOf(rank)[static_cast<size_t>(mesh.shard_dim)] : 0;
  }
  int replicateOf(int rank) const {
    return mesh.replicate_dim >= 0 ? coordOf(rank)[static_cast<size_t>(mesh.replicate_dim)] : 0;
  }
};

inline Topology makeTopology(const dmuon::Plan &plan) {
  Topology t;
  t.mesh = plan.mesh();
  t.G = t.mesh.num_shards;
  t.R = t.mesh.num_replicas;
  t.coord = t.coordOf(mpicheck::gRank);
  t.shard = t.shardOf(mpicheck::gRank);
  t.replicate = t.replicateOf(mpicheck::gRank);
  for (int d = 0; d < t.mesh.ndim; ++d) {
    if (d > 0)
      t.text += ",";
    t.text += std::string(t.mesh.dim_names[d]) + "=" + std::to_string(t.mesh.dim_sizes[d]);
    if (d == t.mesh.shard_dim || d == t.mesh.replicate_dim)
      continue;
    if (t.mpDim >= 0)
      throw std::runtime_error("the test handles one model-parallel mesh dim");
    t.mpDim = d;
    t.mpSize = t.mesh.dim_sizes[d];
    t.mp = t.coord[static_cast<size_t>(d)];
    t.mpName = t.mesh.dim_names[d];
    t.mpCarriesData = t.mesh.dim_carries_data[d] != 0;
  }
  // Color: my rank with the mp coordinate at 0; key: the mp coordinate.
  std::vector<int> c0 = t.coord;
  if (t.mpDim >= 0)
    c0[static_cast<size_t>(t.mpDim)] = 0;
  MPI_Comm_split(MPI_COMM_WORLD, t.rankOf(c0), t.mp, &t.mpComm);
  int size = 0, rank = 0;
  MPI_Comm_size(t.mpComm, &size);
  MPI_Comm_rank(t.mpComm, &rank);
  if (size != t.mpSize || rank != t.mp)
    throw std::runtime_error("model-parallel communicator: size/rank mismatch");
  return t;
}

// ---------------------------------------------------------------- reference
struct Trajectory {
  std::vector<float> losses; // global mean loss per step
  std::vector<double> norms; // global gradient norm per step
  Tensors initial, final;    // full params
};

// Single process: Muon (whole matrices; the experts batched) + AdamW on the
// full model and the full global batch.
inline Trajectory runReference(const dmuon::Plan &plan, const Config &cfg,
                               const std::vector<Spec> &specs, int steps) {
  namespace k = dmuon::kernels;
  const k::MuonHyper mh = muonHyper();
  const k::AdamWHyper ah = adamwHyper();
  Tensors p, g, m, v;
  for (const Spec &s : specs) {
    p[s.name] = initParam(s);
    g[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    m[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    v[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
  }
  Trajectory tr;
  tr.initial = p;
  std::vector<float> x, t;
  k::NsWorkspace ws;
  for (int step = 0; step < steps; ++step) {
    makeBatch(cfg, step, 0, cfg.globalBatch, x, t);
    for (auto &[name, grad] : g)
      std::fill(grad.begin(), grad.end(), 0.0f);
    tr.losses.push_back(
        static_cast<float>(forwardBackward(cfg, p, g, x.data(), t.data(), cfg.globalBatch, 0)));
    double squares = 0;
    for (const auto &[name, grad] : g)
      for (float e : grad)
        squares += static_cast<double>(e) * e;
    tr.norms.push_back(std::sqrt(squares));
    for (const Spec &s : specs) {
      const dmuon_param_info_t info = plan.param(plan.findParam(s.name));
      float *pv = p[s.name].data();
      if (info.role == DMUON_ROLE_MUON) {
        const int64_t batch = s.shape.size() == 3 ? s.shape[0] : 1;
        const int64_t rows = s.shape[s.shape.size() - 2], cols = s.shape.back();
        k::muonStep(pv, m[s.name].data(), g[s.name].data(), batch, rows, cols, mh, ws);
      } else {
        k::adamwStep(pv, m[s.name].data(), v[s.name].data(), g[s.name].data(), s.numel, step + 1,
                     ah);
      }
    }
  }
  tr.final = p;
  return tr;
}

} // namespace mpmodel

#endif
