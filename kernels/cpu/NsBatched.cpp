// Batched Newton-Schulz and the thread spreading that muonStep shares.
//
// A batch of small matrices (an owner's expert slices) runs badly as one
// matrix after another on multi-threaded BLAS: each call is too small to
// keep the threads busy, and each pays the fork/join. Instead T matrices run
// at once, one per OpenMP thread, each on single-threaded BLAS. Debian's
// OpenBLAS 0.3.21 (pthread build) has no per-thread thread count (that came
// with openblas_set_num_threads_local in 0.3.27), so the global count is set
// to 1 for the parallel part and restored after; OpenBLAS runs a call with
// one thread in the caller's thread, which is what makes calls from several
// OpenMP threads safe.
#include "kernels/cpu/NsScratch.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <mutex>

namespace dmuon::kernels {
namespace {

// Holds OpenBLAS at one thread for its lifetime. The count is process-wide,
// so concurrent holders (runtimes on different threads) share one
// save/restore: the first in saves it, the last out restores it.
class SingleThreadedBlas {
public:
  SingleThreadedBlas() {
    std::lock_guard<std::mutex> lock(mutex());
    State &st = state();
    if (st.holders++ == 0) {
      st.saved = openblas_get_num_threads();
      openblas_set_num_threads(1);
    }
  }
  ~SingleThreadedBlas() {
    std::lock_guard<std::mutex> lock(mutex());
    State &st = state();
    if (--st.holders == 0)
      openblas_set_num_threads(st.saved);
  }
  SingleThreadedBlas(const SingleThreadedBlas &) = delete;
  SingleThreadedBlas &operator=(const SingleThreadedBlas &) = delete;

private:
  struct State {
    int holders = 0;
    int saved = 1;
  };
  static std::mutex &mutex() {
    static std::mutex m;
    return m;
  }
  static State &state() {
    static State s;
    return s;
  }
};

} // namespace

int nsBatchThreads(int64_t batch) {
#ifdef _OPENMP
  const int threads = std::min(openblas_get_num_threads(), omp_get_max_threads());
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(batch, threads)));
#else
  (void)batch;
  return 1;
#endif
}

void forEachInBatch(int64_t batch, int64_t scratchFloats, NsWorkspace &ws,
                    const std::function<void(int64_t, float *)> &run) {
  if (batch <= 0)
    return;
  const int threads = nsBatchThreads(batch);
  const auto need = static_cast<size_t>(scratchFloats * threads);
  if (ws.buffer.size() < need)
    ws.buffer.resize(need);
  float *scratch = ws.buffer.data();
  int64_t done = 0;
#ifdef _OPENMP
  if (threads > 1) {
    // Whole rounds of `threads` matrices in parallel; dynamic scheduling
    // evens out a thread slowed by other load on the machine.
    const int64_t parallel = batch / threads * threads;
    SingleThreadedBlas single;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < parallel; ++i)
      run(i, scratch + scratchFloats * omp_get_thread_num());
    done = parallel;
  }
#endif
  // The remainder (fewer than `threads`), or everything without OpenMP, one
  // by one on BLAS's own threads.
  for (int64_t i = done; i < batch; ++i)
    run(i, scratch);
}

void newtonSchulzBatched(const float *in, float *out, int64_t batch, int64_t rows, int64_t cols,
                         int steps, NsCoefficients set, NsWorkspace &ws, NsForm form) {
  if (batch <= 0 || rows <= 0 || cols <= 0)
    return;
  const int64_t n = rows * cols;
  forEachInBatch(batch, nsWorkspaceFloats(rows, cols, form), ws,
                 [&](int64_t i, float *scratch) {
                   newtonSchulzScratch(in + i * n, out + i * n, rows, cols, steps, set, form,
                                       scratch);
                 });
}

} // namespace dmuon::kernels
