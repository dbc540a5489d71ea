#include "kernels/cpu/LinearAlgebra.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

// LAPACK's Fortran entry points (OpenBLAS exports them); the trailing
// lengths are gfortran's hidden character-argument lengths.
extern "C" {
void ssyevd_(const char *jobz, const char *uplo, const int *n, float *a, const int *lda, float *w,
             float *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t,
             size_t);
void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work,
             const int *lwork, int *info);
void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda, const float *tau,
             float *work, const int *lwork, int *info);
}

namespace dmuon::kernels {

namespace {

void transposeSquare(float *a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j)
      std::swap(a[i * n + j], a[j * n + i]);
}

template <typename T> T *grown(std::vector<T> &v, size_t n) {
  if (v.size() < n)
    v.resize(n);
  return v.data();
}

} // namespace

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
          const float *b, float beta, float *c) {
  if (m <= 0 || n <= 0)
    return;
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(transA ? m : k), b, static_cast<int>(transB ? k : n), beta, c,
              static_cast<int>(n));
}

std::string symmetricEigen(float *a, float *values, int64_t n64, LinalgWorkspace &ws) {
  if (n64 <= 0)
    return {};
  const int n = static_cast<int>(n64);
  int info = 0, lwork = -1, liwork = -1, iworkSize = 0;
  float workSize = 0;
  // Row-major and column-major are the same symmetric matrix.
  ssyevd_("V", "U", &n, a, &n, values, &workSize, &lwork, &iworkSize, &liwork, &info, 1, 1);
  if (info != 0)
    return "ssyevd workspace query failed (info " + std::to_string(info) + ")";
  lwork = static_cast<int>(workSize) + 1;
  liwork = iworkSize;
  ssyevd_("V", "U", &n, a, &n, values, grown(ws.work, static_cast<size_t>(lwork)), &lwork,
          grown(ws.iwork, static_cast<size_t>(liwork)), &liwork, &info, 1, 1);
  if (info != 0)
    return "ssyevd failed (info " + std::to_string(info) + ") on a " + std::to_string(n) + "x" +
           std::to_string(n) + " matrix";
  // Column-major eigenvectors are row-major rows: transpose, then put the
  // largest eigenvalue first as SOAP's reference does.
  transposeSquare(a, n64);
  for (int64_t r = 0; r < n64; ++r)
    std::reverse(a + r * n64, a + (r + 1) * n64);
  std::reverse(values, values + n64);
  return {};
}

std::string orthonormalize(float *a, int64_t n64, LinalgWorkspace &ws) {
  if (n64 <= 0)
    return {};
  const int n = static_cast<int>(n64);
  float *cm = grown(ws.columnMajor, static_cast<size_t>(n64 * n64));
  for (int64_t i = 0; i < n64; ++i)
    for (int64_t j = 0; j < n64; ++j)
      cm[j * n64 + i] = a[i * n64 + j];
  float *tau = grown(ws.tau, static_cast<size_t>(n64));
  int info = 0, lwork = -1;
  float q1 = 0, q2 = 0;
  sgeqrf_(&n, &n, cm, &n, tau, &q1, &lwork, &info);
  if (info == 0)
    sorgqr_(&n, &n, &n, cm, &n, tau, &q2, &lwork, &info);
  if (info != 0)
    return "QR workspace query failed (info " + std::to_string(info) + ")";
  lwork = static_cast<int>(std::max(q1, q2)) + 1;
  float *work = grown(ws.work, static_cast<size_t>(lwork));
  sgeqrf_(&n, &n, cm, &n, tau, work, &lwork, &info);
  if (info == 0)
    sorgqr_(&n, &n, &n, cm, &n, tau, work, &lwork, &info);
  if (info != 0)
    return "QR failed (info " + std::to_string(info) + ") on a " + std::to_string(n) + "x" +
           std::to_string(n) + " matrix";
  for (int64_t i = 0; i < n64; ++i)
    for (int64_t j = 0; j < n64; ++j)
      a[i * n64 + j] = cm[j * n64 + i];
  return {};
}

void adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                   float eps, float vScale) {
  const float take = static_cast<float>(1.0 - static_cast<double>(beta2));
  for (int64_t i = 0; i < n; ++i) {
    if (g)
      v[i] = beta2 * v[i] + take * (g[i] * g[i]);
    out[i] = m[i] / (std::sqrt(v[i] * vScale) + eps);
  }
}

void decayAdd(float *dst, const float *src, float keep, float take, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = keep * dst[i] + take * src[i];
}

void clampMagnitude(float *x, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > bound)
      x[i] = bound;
    else if (x[i] < -bound)
      x[i] = -bound;
}

void permute(float *x, int64_t rows, int64_t cols, const int64_t *order, bool columns,
             float *scratch) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      scratch[r * cols + c] = columns ? x[r * cols + order[c]] : x[order[r] * cols + c];
  std::memcpy(x, scratch, static_cast<size_t>(rows * cols) * sizeof(float));
}

void scaleColumns(float *x, int64_t rows, int64_t cols, const float *scales) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] *= scales[c];
}

} // namespace dmuon::kernels
