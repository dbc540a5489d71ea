// The optimizer hyper-parameters and packed-buffer types every kernel path
// takes: the CPU kernels (kernels/cpu), the CUDA kernels (kernels/cuda) and
// the runtime's devices use these structs directly. Plain C++17, header-only,
// no dependencies: nvcc compiles it in host code.
#ifndef DMUON_KERNELS_HYPER_H
#define DMUON_KERNELS_HYPER_H

#include <cstdint>

namespace dmuon::kernels {

enum class NsCoefficients { Original, PolarExpress };

// How a Newton-Schulz iteration is computed; every form runs the same
// polynomial iteration and differs only in rounding (kernels/NsForms.h has
// their flop counts and the per-shape rule behind Auto).
//  - ThreeGemm: A = X X^T, B = bA + cA^2, X <- aX + BX as three general
//    GEMMs; the reference path.
//  - Symmetric: the same products with SYRK for the two symmetric ones
//    (X X^T and A A), half their flops.
//  - Gram: iterates on the s x s Gram matrix and touches the s x l matrix
//    only at the ends (rectangular matrices).
//  - Auto: the rule in NsForms.h picks one per shape.
enum class NsForm { Auto, ThreeGemm, Symmetric, Gram };

// A batch of row-major matrices (batch 1: one matrix).
struct MatrixShape {
  int64_t batch = 1, rows = 0, cols = 0;
};

// The element type of a packed (broadcast) buffer.
enum class PackedType { F32 = 0, BF16 = 1 };

struct MuonHyper {
  float lr = 0.02f;
  float momentum = 0.95f;
  float weightDecay = 0.0f;
  bool nesterov = true;
  // buf <- mu*buf + (1-mu)*g (torch.optim.Muon's lerp) instead of
  // buf <- mu*buf + g; Nesterov then mixes u = (1-mu)*g + mu*buf.
  bool emaMomentum = false;
  bool matchRmsAdamW = false; // lr scale 0.2*sqrt(max(m,n)) instead of sqrt(max(1,m/n))
  int nsSteps = 5;
  NsCoefficients coefficients = NsCoefficients::Original;
  NsForm nsForm = NsForm::Auto;
  float normuonBeta2 = 0.95f; // NorMuon's second-moment decay (kernels/cpu/NorMuonKernels.h)
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.0f;
};

// SOAP (Vyas et al. 2024): Adam in the eigenbasis of Shampoo's statistics
// (optim/Soap.h). A side longer than maxPreconditionDim is left unrotated.
struct SoapHyper {
  float lr = 3e-3f;
  float beta1 = 0.95f;
  float beta2 = 0.95f;
  float shampooBeta = 0.95f; // the decay of the L and R statistics
  float eps = 1e-8f;
  float weightDecay = 0.01f;
  int preconditionFrequency = 10;
  int64_t maxPreconditionDim = 10000;
};

// Shampoo with Adam grafting (optim/Shampoo.h): L^-1/4 F R^-1/4 at the norm
// of Adam's update; Adam alone before the first root.
struct ShampooHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-12f;
  float weightDecay = 1e-5f;
  float graftEps = 1e-8f;
  int preconditionFrequency = 100;
  int64_t maxPreconditionDim = 8192;
};

} // namespace dmuon::kernels

#endif
