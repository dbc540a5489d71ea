// Lower bounds for P||Cmax (see LowerBound.h). Deciding "can the items be
// packed into S bins of capacity C?" is bin packing; any lower bound on the
// number of bins that exceeds S refutes C, so the optimum exceeds C. A
// bisection on C then turns bin-packing bounds into makespan bounds:
//  * Martello–Toth L2: for a threshold k, items larger than C-k each need
//    their own bin, items in (C/2, C-k] too, and the items in [k, C/2] must
//    fit in what is left: L2(k) = |J1|+|J2| + max(0, ceil((w(J3) - (|J2| C -
//    w(J2))) / C)).
//  * Fekete–Schepers dual feasible functions u_k(x) = x if (k+1)x is an
//    integer, else floor((k+1)x)/k (x = w/C): the items' u_k values of one
//    bin sum to at most 1, so sum u_k > S refutes C. u_k with k = floor(C/w)
//    captures "at most k items of size w per bin", which is what decides
//    models made of thousands of identical expert matrices.
#include "passes/LowerBound.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace dmuon {

namespace {

struct Size {
  double w;
  double count;
};

// Items grouped by size, largest first; item i counts copies[i] times
// (once each without copies).
std::vector<Size> distinctSizes(const std::vector<double> &cost,
                                const std::vector<double> &copies) {
  std::map<double, double, std::greater<double>> m;
  for (size_t i = 0; i < cost.size(); ++i)
    if (cost[i] > 0)
      m[cost[i]] += copies.empty() ? 1.0 : copies[i];
  std::vector<Size> out;
  out.reserve(m.size());
  for (auto &[w, n] : m)
    out.push_back({w, n});
  return out;
}

constexpr double kEps = 1e-9;

// Martello–Toth L2 for capacity C (every item <= C).
double boundL2(const std::vector<Size> &sz, double C) {
  // Candidate thresholds k: 0 and every distinct size <= C/2.
  double best = 0;
  auto evalK = [&](double k) {
    double n1 = 0, n2 = 0, w2 = 0, w3 = 0;
    for (const Size &s : sz) {
      if (s.w > C - k)
        n1 += s.count;
      else if (s.w > C / 2)
        n2 += s.count, w2 += s.w * s.count;
      else if (s.w >= k)
        w3 += s.w * s.count;
    }
    double rest = w3 - (n2 * C - w2);
    double l = n1 + n2 + (rest > 0 ? std::ceil(rest / C - kEps) : 0);
    best = std::max(best, l);
  };
  evalK(0);
  int evaluated = 0;
  for (const Size &s : sz)
    if (s.w <= C / 2 && ++evaluated <= 256)
      evalK(s.w);
  return best;
}

// Fekete–Schepers u_k for the k that matter: small k, and floor(C/w) for the
// distinct sizes w (the largest number of such items one bin can hold).
double boundDff(const std::vector<Size> &sz, double C) {
  std::vector<long long> ks;
  for (long long k = 1; k <= 16; ++k)
    ks.push_back(k);
  for (const Size &s : sz) {
    double q = std::floor(C / s.w + kEps);
    if (q >= 1 && q <= 1e6)
      ks.push_back(static_cast<long long>(q));
    if (ks.size() > 512)
      break;
  }
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  double best = 0;
  for (long long k : ks) {
    double sum = 0;
    for (const Size &s : sz) {
      double x = s.w / C;
      double y = (k + 1) * x;
      double fl = std::floor(y + kEps);
      double u = std::fabs(y - fl) <= kEps * std::max(1.0, y) ? x : fl / k;
      sum += u * s.count;
    }
    best = std::max(best, std::ceil(sum - 1e-7));
  }
  return best;
}

// Knapsack (configuration) bound: with every slot at most C, a slot's share
// of the "big" items (the few largest distinct sizes) is at most K(C), the
// largest sum of big items (within their counts) that fits in C. So the total
// is at most S*K(C) + w(small items); if it is less, C is refuted. This is
// what proves Llama-3.1-405B on 64 slots cannot reach 1.01 of the average:
// no mix of its two big matrix sizes fills a slot to within 1%.
bool refutedByKnapsack(const std::vector<Size> &sz, double C, double S, double total) {
  constexpr size_t kMaxTypes = 6;
  constexpr long kMaxNodes = 200000;
  std::vector<Size> big;
  double small = 0;
  for (const Size &s : sz) {
    if (big.size() < kMaxTypes && s.w >= C / 64)
      big.push_back(s);
    else
      small += s.w * s.count;
  }
  if (big.empty())
    return false;
  double bestSum = 0;
  long nodes = 0;
  bool aborted = false;
  // Depth-first over types, largest first, most copies first.
  auto dfs = [&](auto &&self, size_t t, double sum) -> void {
    if (aborted)
      return;
    if (++nodes > kMaxNodes) {
      aborted = true;
      return;
    }
    if (sum > bestSum)
      bestSum = sum;
    if (t == big.size() || bestSum >= C * (1 - 1e-15))
      return;
    // Upper bound: fill the rest with this and later types without counts.
    double maxCopies = std::min(big[t].count, std::floor((C - sum) / big[t].w + kEps));
    for (double k = maxCopies; k >= 0; --k) {
      double next = sum + k * big[t].w;
      if (next > C * (1 + 1e-15))
        continue;
      if (next + (C - next) < bestSum) // cannot beat the best
        break;
      self(self, t + 1, next);
      if (aborted)
        return;
    }
  };
  dfs(dfs, 0, 0.0);
  if (aborted)
    return false;
  return S * bestSum + small < total * (1 - 1e-12);
}

} // namespace

LowerBound strongLowerBound(const std::vector<double> &cost, int slotsIn) {
  return strongLowerBound(cost, {}, slotsIn);
}

LowerBound strongLowerBound(const std::vector<double> &cost, const std::vector<double> &copies,
                            int slotsIn) {
  LowerBound lb;
  const double S = std::max(1, slotsIn);
  std::vector<Size> sz = distinctSizes(cost, copies);
  if (sz.empty())
    return lb;
  double total = 0;
  for (const Size &s : sz)
    total += s.w * s.count;
  const double largest = sz.front().w;
  lb.simple = std::max(total / S, largest);
  lb.value = total / S;
  lb.kind = "average";
  if (largest > lb.value) {
    lb.value = largest;
    lb.kind = "largest";
  }
  // c_S + c_{S+1}: two of the S+1 largest items share a slot.
  {
    double seen = 0, cS = 0, cS1 = 0;
    for (const Size &s : sz) {
      if (seen < S && seen + s.count >= S)
        cS = s.w;
      if (seen < S + 1 && seen + s.count >= S + 1) {
        cS1 = s.w;
        break;
      }
      seen += s.count;
    }
    if (cS1 > 0 && cS + cS1 > lb.value) {
      lb.value = cS + cS1;
      lb.kind = "pair";
    }
  }
  if (S == 1)
    return lb;
  // Bisection on the capacity: lo is always a proven bound, hi is not
  // refuted. hi starts at a feasible makespan (list scheduling's bound).
  double lo = lb.value, hi = total / S + largest;
  auto refutedBy = [&](double C) -> const char * {
    if (boundL2(sz, C) > S)
      return "mt_l2";
    if (boundDff(sz, C) > S)
      return "dff";
    if (refutedByKnapsack(sz, C, S, total))
      return "knapsack";
    return nullptr;
  };
  if (!refutedBy(lo)) // also the common case: the simple bound is tight
    return lb;
  const char *kind = refutedBy(lo);
  for (int it = 0; it < 64 && hi - lo > 1e-12 * hi; ++it) {
    double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi)
      break;
    if (const char *k = refutedBy(mid)) {
      lo = mid;
      kind = k;
    } else {
      hi = mid;
    }
  }
  // lo is refuted: the optimum is larger than lo. Report the smallest value
  // not known to be refuted, rounded towards lo so it stays a bound.
  lb.value = lo;
  lb.kind = kind;
  return lb;
}

} // namespace dmuon
