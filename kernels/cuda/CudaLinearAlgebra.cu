// The dense linear algebra of the preconditioned rules on the GPU (see
// CudaLinearAlgebra.h): GEMM on cuBLAS, the symmetric eigendecomposition
// (syevd) and the QR factorization (geqrf + orgqr) on cuSOLVER, and the
// pinned staging of host arrays. The element-wise kernels are in
// CudaLinalgElementwise.cu.
//
// cuBLAS and cuSOLVER are column-major, the runtime row-major. A row-major
// m x n buffer read column-major is its transpose, so C = op(A) op(B)
// row-major is C^T = op(B)^T op(A)^T column-major: the same buffers with the
// operands swapped. The factorizations run on a column-major copy in the
// state's square scratch and are written back row-major by a kernel, as the
// CPU kernels transpose around LAPACK (kernels/cpu/LinearAlgebra.cpp).
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaLinearAlgebra.h"

#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

namespace dmuon::cuda {

// Grown to the largest side seen (or reserved) and kept: a step of a size
// already seen allocates nothing.
struct LinalgState {
  cusolverDnHandle_t solver = nullptr;
  int64_t side = 0;        // square matrices up to side x side fit
  float *square = nullptr; // side^2: the column-major matrix the solver works on
  float *tau = nullptr;    // side: the Householder scalars
  float *work = nullptr;   // workFloats: cuSOLVER's workspace
  int workFloats = 0;
  int *info = nullptr;     // 2 device ints: the factorizations' info
  int *hostInfo = nullptr; // 2 pinned ints
  // Host arrays reach the kernels through pinned staging: `staged` is
  // recorded after each copy out of it, and waited for before the staging
  // is written again.
  void *staging = nullptr, *uploaded = nullptr;
  size_t stagingBytes = 0;
  cudaEvent_t staged = nullptr;
};

namespace {

const char *solverStatusName(cusolverStatus_t s) {
  switch (s) {
  case CUSOLVER_STATUS_NOT_INITIALIZED:
    return "CUSOLVER_STATUS_NOT_INITIALIZED";
  case CUSOLVER_STATUS_ALLOC_FAILED:
    return "CUSOLVER_STATUS_ALLOC_FAILED (out of device memory)";
  case CUSOLVER_STATUS_INVALID_VALUE:
    return "CUSOLVER_STATUS_INVALID_VALUE";
  case CUSOLVER_STATUS_ARCH_MISMATCH:
    return "CUSOLVER_STATUS_ARCH_MISMATCH (the GPU lacks a feature cuSOLVER needs)";
  case CUSOLVER_STATUS_EXECUTION_FAILED:
    return "CUSOLVER_STATUS_EXECUTION_FAILED (a kernel failed to launch)";
  case CUSOLVER_STATUS_INTERNAL_ERROR:
    return "CUSOLVER_STATUS_INTERNAL_ERROR";
  case CUSOLVER_STATUS_NOT_SUPPORTED:
    return "CUSOLVER_STATUS_NOT_SUPPORTED";
  case CUSOLVER_STATUS_INVALID_WORKSPACE:
    return "CUSOLVER_STATUS_INVALID_WORKSPACE";
  default:
    return "cuSOLVER error";
  }
}

Result solverFail(cusolverStatus_t s, const char *what) {
  return Result{static_cast<int>(s), std::string(what) + ": " + solverStatusName(s) + " (status " +
                                         std::to_string(static_cast<int>(s)) + ")"};
}

#define DMUON_SOLVER_TRY(expr, what)                                                               \
  do {                                                                                             \
    const cusolverStatus_t dmuonSolver_ = (expr);                                                  \
    if (dmuonSolver_ != CUSOLVER_STATUS_SUCCESS)                                                   \
      return solverFail(dmuonSolver_, what);                                                       \
  } while (0)

// The largest side: cuSOLVER and cuBLAS take int sizes, and side^2 elements
// are addressed by the kernels in int64.
constexpr int64_t kMaxSide = 46340; // floor(sqrt(INT_MAX))

// a[i][j] (row-major) = the eigenvector of the j-th largest eigenvalue's
// i-th entry: syevd leaves them as ascending columns of `cm` (column-major).
__global__ void eigenvectorsRowMajorKernel(const float *cm, float *a, int64_t n) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n * n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p / n, j = p % n;
    a[p] = cm[(n - 1 - j) * n + i];
  }
}

// v reversed in place: ascending eigenvalues to descending.
__global__ void reverseKernel(float *v, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n / 2;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float t = v[i];
    v[i] = v[n - 1 - i];
    v[n - 1 - i] = t;
  }
}

// out = in^T (n x n, out of place): row-major to column-major and back.
__global__ void transposeKernel(const float *in, float *out, int64_t n) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n * n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[(p % n) * n + p / n] = in[p];
}

void freeSquares(LinalgState &s) {
  cudaFree(s.square);
  cudaFree(s.tau);
  cudaFree(s.work);
  s.square = s.tau = s.work = nullptr;
  s.workFloats = 0;
  s.side = 0;
}

void freeStaging(LinalgState &s) {
  cudaFreeHost(s.staging);
  cudaFree(s.uploaded);
  s.staging = s.uploaded = nullptr;
  s.stagingBytes = 0;
}

// What stateOf makes, step by step (on failure the caller frees it).
Result createState(Context *ctx, LinalgState &s) {
  DMUON_SOLVER_TRY(cusolverDnCreate(&s.solver), "cusolverDnCreate");
  DMUON_SOLVER_TRY(cusolverDnSetStream(s.solver, ctx->stream), "cusolverDnSetStream");
  DMUON_CUDA_TRY(cudaEventCreateWithFlags(&s.staged, cudaEventDisableTiming),
                 "cudaEventCreate (host-array staging)");
  DMUON_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&s.info), 2 * sizeof(int)),
                 "cudaMalloc (cuSOLVER info)");
  DMUON_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&s.hostInfo), 2 * sizeof(int)),
                 "cudaMallocHost (cuSOLVER info)");
  return {};
}

// The context's state, created on first use; a failed creation leaves none.
Result stateOf(Context *ctx, LinalgState **out) {
  if (!ctx->linalg) {
    ctx->linalg = new LinalgState;
    Result r = createState(ctx, *ctx->linalg);
    if (!r.ok()) {
      destroyLinalg(ctx);
      cudaGetLastError(); // a failed allocation stays the last error otherwise
      return r;
    }
  }
  *out = ctx->linalg;
  return {};
}

// Room for `bytes` of host array in the staging and its device copy.
Result ensureStaging(Context *ctx, LinalgState &s, size_t bytes) {
  if (bytes <= s.stagingBytes)
    return {};
  // The old buffers may still be read by enqueued copies and kernels.
  DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize (growing staging)");
  freeStaging(s);
  DMUON_CUDA_TRY(cudaMallocHost(&s.staging, bytes), "cudaMallocHost (host-array staging)");
  DMUON_CUDA_TRY(cudaMalloc(&s.uploaded, bytes), "cudaMalloc (host-array staging)");
  s.stagingBytes = bytes;
  return {};
}

// Room for the factorizations of side x side matrices.
Result ensureSide(Context *ctx, LinalgState &s, int64_t side) {
  if (side > kMaxSide)
    return invalid("a " + std::to_string(side) + "x" + std::to_string(side) +
                   " matrix is beyond cuSOLVER's int sizes (at most " + std::to_string(kMaxSide) +
                   " per side)");
  DMUON_RESULT_TRY(ensureStaging(ctx, s, static_cast<size_t>(side) * sizeof(int64_t)));
  if (side <= s.side)
    return {};
  DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream),
                 "cudaStreamSynchronize (growing cuSOLVER scratch)");
  freeSquares(s);
  const auto floats = [](int64_t n) { return static_cast<size_t>(n) * sizeof(float); };
  DMUON_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&s.square), floats(side * side)),
                 "cudaMalloc (cuSOLVER matrix)");
  DMUON_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&s.tau), floats(side)),
                 "cudaMalloc (cuSOLVER tau)");
  const int n = static_cast<int>(side);
  int eigen = 0, qr = 0, q = 0;
  // s.tau stands in for the eigenvalues: the query reads no values.
  DMUON_SOLVER_TRY(cusolverDnSsyevd_bufferSize(s.solver, CUSOLVER_EIG_MODE_VECTOR,
                                               CUBLAS_FILL_MODE_UPPER, n, s.square, n, s.tau,
                                               &eigen),
                   "cusolverDnSsyevd_bufferSize");
  DMUON_SOLVER_TRY(cusolverDnSgeqrf_bufferSize(s.solver, n, n, s.square, n, &qr),
                   "cusolverDnSgeqrf_bufferSize");
  DMUON_SOLVER_TRY(cusolverDnSorgqr_bufferSize(s.solver, n, n, n, s.square, n, s.tau, &q),
                   "cusolverDnSorgqr_bufferSize");
  const int work = std::max({eigen, qr, q, 1});
  DMUON_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&s.work), floats(work)),
                 "cudaMalloc (cuSOLVER workspace)");
  s.workFloats = work;
  s.side = side;
  return {};
}

// The state, sized for n x n, on the context's device (the caller's guard).
Result prepare(Context *ctx, int64_t n, LinalgState **out) {
  DMUON_RESULT_TRY(stateOf(ctx, out));
  Result r = ensureSide(ctx, **out, n);
  if (!r.ok())
    cudaGetLastError(); // a failed allocation would read as the next launch's error
  return r;
}

// Waits for the stream and turns the first `count` infos into a message.
Result checkInfo(Context *ctx, LinalgState &s, int count, const char *const *what, int64_t n) {
  DMUON_CUDA_TRY(cudaMemcpyAsync(s.hostInfo, s.info, static_cast<size_t>(count) * sizeof(int),
                                 cudaMemcpyDeviceToHost, ctx->stream),
                 "cudaMemcpyAsync (cuSOLVER info)");
  DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize (cuSOLVER info)");
  for (int i = 0; i < count; ++i) {
    const int info = s.hostInfo[i];
    if (info == 0)
      continue;
    const std::string shape = std::to_string(n) + "x" + std::to_string(n);
    return Result{-1, info < 0 ? std::string(what[i]) + " rejected its parameter " +
                                     std::to_string(-info) + " on a " + shape + " matrix"
                               : std::string(what[i]) + " failed (info " + std::to_string(info) +
                                     ") on a " + shape +
                                     " matrix: it did not converge (non-finite statistics?)"};
  }
  return {};
}

Result checkSquare(Context *ctx, int64_t n, const char *what) {
  if (!ctx)
    return invalid(std::string(what) + ": null dmuon::cuda::Context");
  if (n < 0)
    return invalid(std::string(what) + ": negative size");
  return {};
}

} // namespace

void destroyLinalg(Context *ctx) {
  LinalgState *s = ctx->linalg;
  if (!s)
    return;
  freeSquares(*s);
  freeStaging(*s);
  cudaFree(s->info);
  cudaFreeHost(s->hostInfo);
  if (s->staged)
    cudaEventDestroy(s->staged);
  if (s->solver)
    cusolverDnDestroy(s->solver);
  delete s;
  ctx->linalg = nullptr;
}

Result stageHostArray(Context *ctx, const void *host, size_t bytes, const void **device) {
  LinalgState *s = nullptr;
  DMUON_RESULT_TRY(stateOf(ctx, &s));
  if (Result r = ensureStaging(ctx, *s, bytes); !r.ok()) {
    cudaGetLastError();
    return r;
  }
  DMUON_CUDA_TRY(cudaEventSynchronize(s->staged), "cudaEventSynchronize (host-array staging)");
  std::memcpy(s->staging, host, bytes);
  DMUON_CUDA_TRY(
      cudaMemcpyAsync(s->uploaded, s->staging, bytes, cudaMemcpyHostToDevice, ctx->stream),
      "cudaMemcpyAsync (host array)");
  DMUON_CUDA_TRY(cudaEventRecord(s->staged, ctx->stream), "cudaEventRecord (host-array staging)");
  *device = s->uploaded;
  return {};
}

Result reserveLinearAlgebra(Context *ctx, int64_t maxSide) {
  DMUON_RESULT_TRY(checkSquare(ctx, maxSide, "reserveLinearAlgebra"));
  if (maxSide == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  LinalgState *s = nullptr;
  return prepare(ctx, maxSide, &s);
}

Result gemm(Context *ctx, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
            const float *a, const float *b, float beta, float *c) {
  if (!ctx)
    return invalid("gemm: null dmuon::cuda::Context");
  if (m < 0 || n < 0 || k < 0)
    return invalid("gemm: negative size");
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return invalid("gemm: a side beyond cuBLAS's int sizes (" + std::to_string(m) + "x" +
                   std::to_string(n) + "x" + std::to_string(k) + ")");
  if (m == 0 || n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  // The context's handle is in CUBLAS_DEFAULT_MATH: sgemm stays full fp32.
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  DMUON_BLAS_TRY(cublasSgemm(ctx->blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                             transA ? CUBLAS_OP_T : CUBLAS_OP_N, ni, mi, ki, &alpha, b,
                             transB ? ki : ni, a, transA ? mi : ki, &beta, c, ni),
                 "cublasSgemm");
  return {};
}

Result symmetricEigen(Context *ctx, float *a, float *values, int64_t n) {
  DMUON_RESULT_TRY(checkSquare(ctx, n, "symmetricEigen"));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  LinalgState *s = nullptr;
  DMUON_RESULT_TRY(prepare(ctx, n, &s));
  const int ni = static_cast<int>(n);
  // A symmetric matrix is the same in either order; the upper triangle of
  // the column-major view is the one the CPU's ssyevd reads.
  DMUON_CUDA_TRY(cudaMemcpyAsync(s->square, a, static_cast<size_t>(n * n) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, ctx->stream),
                 "cudaMemcpyAsync (eigendecomposition input)");
  DMUON_SOLVER_TRY(cusolverDnSsyevd(s->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, ni,
                                    s->square, ni, values, s->work, s->workFloats, s->info),
                   "cusolverDnSsyevd");
  eigenvectorsRowMajorKernel<<<blocksFor(n * n), kThreads, 0, ctx->stream>>>(s->square, a, n);
  reverseKernel<<<blocksFor(n / 2 + 1), kThreads, 0, ctx->stream>>>(values, n);
  DMUON_LAUNCH_CHECK("launching the eigenvector reordering kernels");
  const char *what[] = {"cusolverDnSsyevd"};
  return checkInfo(ctx, *s, 1, what, n);
}

Result orthonormalize(Context *ctx, float *a, int64_t n) {
  DMUON_RESULT_TRY(checkSquare(ctx, n, "orthonormalize"));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  LinalgState *s = nullptr;
  DMUON_RESULT_TRY(prepare(ctx, n, &s));
  const int ni = static_cast<int>(n);
  transposeKernel<<<blocksFor(n * n), kThreads, 0, ctx->stream>>>(a, s->square, n);
  DMUON_LAUNCH_CHECK("launching the transpose kernel");
  DMUON_SOLVER_TRY(
      cusolverDnSgeqrf(s->solver, ni, ni, s->square, ni, s->tau, s->work, s->workFloats, s->info),
      "cusolverDnSgeqrf");
  DMUON_SOLVER_TRY(cusolverDnSorgqr(s->solver, ni, ni, ni, s->square, ni, s->tau, s->work,
                                    s->workFloats, s->info + 1),
                   "cusolverDnSorgqr");
  transposeKernel<<<blocksFor(n * n), kThreads, 0, ctx->stream>>>(s->square, a, n);
  DMUON_LAUNCH_CHECK("launching the transpose kernel");
  const char *what[] = {"cusolverDnSgeqrf", "cusolverDnSorgqr"};
  return checkInfo(ctx, *s, 2, what, n);
}

} // namespace dmuon::cuda
