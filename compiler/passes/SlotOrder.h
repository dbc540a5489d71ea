// The partitioner's slots in (load, index) order (passes/Partitioner.cpp).
// LPT and the refinement touch at most a few slots per unit, and at 2^24
// fine slots with a dozen units almost every slot keeps the load it started
// with for the whole pass. So instead of a balanced tree of every slot (a
// node per slot, which would outweigh the problem and its work), a tree
// holds the touched slots and the untouched ones stay in their fixed
// starting order, read together as one sorted sequence. The order, and so every tie
// between equal loads (the lower index first), is exactly the one tree's.
#ifndef DMUON_COMPILER_PASSES_SLOTORDER_H
#define DMUON_COMPILER_PASSES_SLOTORDER_H

#include <algorithm>
#include <cstddef>
#include <set>
#include <utility>
#include <vector>

namespace dmuon::partition {

class SlotOrder {
public:
  using Key = std::pair<double, int>; // (load, slot)

  // Orders the slots by `load`, which it then owns the updates of (set()).
  // The slots with `startTouched` true go to the tree; the others are
  // untouched until set() first changes them. Untouched slots of one equal
  // load (no initial loads: all 0) are the index range itself and cost no
  // memory beyond one bit each; otherwise they are sorted once.
  SlotOrder(std::vector<double> &load, std::vector<bool> startTouched)
      : load_(load), touched_(std::move(startTouched)) {
    const int S = static_cast<int>(load.size());
    touched_.resize(static_cast<size_t>(S), false);
    bool equal = true, any = false;
    double base = 0;
    for (int s = 0; s < S; ++s) {
      if (touched_[s]) {
        tree_.insert({load[s], s});
        continue;
      }
      if (any && load[s] != base)
        equal = false;
      if (!any)
        base = load[s];
      any = true;
    }
    if (equal) {
      size_ = S;
    } else {
      identity_ = false;
      for (int s = 0; s < S; ++s)
        if (!touched_[s])
          sorted_.push_back({load[s], s});
      std::sort(sorted_.begin(), sorted_.end());
      size_ = static_cast<int>(sorted_.size());
    }
    tail_ = size_;
  }

  bool touched(int s) const { return touched_[s]; }

  // Moves slot s to load v.
  void set(int s, double v) {
    if (touched_[s])
      tree_.erase({load_[s], s});
    else
      touched_[s] = true; // leaves the untouched sequence lazily
    load_[s] = v;
    tree_.insert({v, s});
  }

  // The least (load, index).
  int front() const {
    const int h = untouchedFront();
    if (tree_.empty())
      return h;
    if (h < 0)
      return tree_.begin()->second;
    return std::min(*tree_.begin(), Key{load_[h], h}).second;
  }

  // The most-loaded slot; the lowest index among equal loads.
  int maxLowestIndex() const {
    int best = -1;
    if (!tree_.empty()) {
      const double mx = tree_.rbegin()->first;
      best = tree_.lower_bound({mx, -1})->second;
    }
    const int u = untouchedMaxLowestIndex();
    if (u < 0)
      return best;
    if (best < 0 || load_[u] > load_[best] || (load_[u] == load_[best] && u < best))
      return best = u;
    return best;
  }

  // Calls f(slot) in ascending (load, index) order while it returns true.
  template <typename F> void forEachAscending(F &&f) const {
    auto it = tree_.begin();
    int i = head();
    while (true) {
      const bool haveU = i < size_;
      const bool haveT = it != tree_.end();
      if (!haveU && !haveT)
        return;
      if (haveU && (!haveT || Key{load_[at(i)], at(i)} < *it)) {
        if (!f(at(i)))
          return;
        ++i;
        advance(i);
      } else {
        if (!f(it->second))
          return;
        ++it;
      }
    }
  }

private:
  int at(int i) const { return identity_ ? i : sorted_[static_cast<size_t>(i)].second; }
  // The first untouched position at or after i.
  void advance(int &i) const {
    while (i < size_ && touched_[at(i)])
      ++i;
  }
  int head() const {
    advance(head_);
    return head_;
  }
  int untouchedFront() const {
    const int i = head();
    return i < size_ ? at(i) : -1;
  }
  // The untouched slot of the largest load, lowest index among equals.
  int untouchedMaxLowestIndex() const {
    while (tail_ > head() && touched_[at(tail_ - 1)])
      --tail_;
    if (tail_ <= head())
      return -1;
    if (identity_)
      return untouchedFront(); // all of one load
    const double mx = sorted_[static_cast<size_t>(tail_ - 1)].first;
    int i = static_cast<int>(std::lower_bound(sorted_.begin(), sorted_.end(), Key{mx, -1}) -
                             sorted_.begin());
    advance(i);
    return at(i);
  }

  std::vector<double> &load_;
  std::vector<bool> touched_;
  std::set<Key> tree_; // the touched slots
  bool identity_ = true;
  std::vector<Key> sorted_;  // the untouched (load, slot) when not identity_
  int size_ = 0;             // positions in the untouched sequence
  mutable int head_ = 0;     // no untouched slot before it
  mutable int tail_ = 0;     // none at or after it
};

} // namespace dmuon::partition

#endif
