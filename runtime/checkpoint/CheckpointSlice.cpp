#include "checkpoint/CheckpointSlice.h"

#include <algorithm>
#include <cstring>

namespace dmuon::rt::ckpt {

std::string describe(const Slice &s) {
  if (s.shape.empty() && s.offset.empty())
    return "[whole]";
  std::string out = "[";
  for (size_t k = 0; k < s.shape.size(); ++k)
    out += (k ? ", " : "") + std::to_string(s.offset[k]) + ":" +
           std::to_string(s.offset[k] + s.shape[k]);
  return out + "]";
}

std::string resolve(const Slice &s, const std::vector<int64_t> &full, Slice &out) {
  if (s.offset.empty() && s.shape.empty()) {
    out.offset.assign(full.size(), 0);
    out.shape = full;
    return {};
  }
  if (s.shape.size() != full.size() || s.offset.size() != full.size())
    return "its slice " + describe(s) + " has " + std::to_string(s.shape.size()) +
           " dims, the param " + std::to_string(full.size());
  for (size_t k = 0; k < full.size(); ++k)
    // Written so that nothing overflows: offset and shape are >= 0 (the
    // index reader checks) and offset <= full[k].
    if (s.offset[k] > full[k] || s.shape[k] > full[k] - s.offset[k])
      return "its slice " + describe(s) + " lies outside the param's dim " + std::to_string(k) +
             " of size " + std::to_string(full[k]);
  out = s;
  return {};
}

bool copyOverlap(const float *src, const Slice &srcBox, float *dst, const Slice &dstBox,
                 std::vector<uint8_t> &covered) {
  const size_t n = dstBox.shape.size();
  std::vector<int64_t> lo(n), hi(n);
  for (size_t k = 0; k < n; ++k) {
    lo[k] = std::max(srcBox.offset[k], dstBox.offset[k]);
    hi[k] = std::min(srcBox.offset[k] + srcBox.shape[k], dstBox.offset[k] + dstBox.shape[k]);
    if (lo[k] >= hi[k])
      return true; // disjoint
  }
  // Row-major strides of both boxes; runs along the last dim are contiguous.
  std::vector<int64_t> srcStride(n, 1), dstStride(n, 1);
  for (size_t k = n; k-- > 1;) {
    srcStride[k - 1] = srcStride[k] * srcBox.shape[k];
    dstStride[k - 1] = dstStride[k] * dstBox.shape[k];
  }
  const int64_t run = n ? hi[n - 1] - lo[n - 1] : 1;
  // Two passes over the same runs: check every element is new, then copy,
  // so a refused overlap leaves `dst` and `covered` as they were.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> at = lo;
    while (true) {
      int64_t s = 0, d = 0;
      for (size_t k = 0; k < n; ++k) {
        s += (at[k] - srcBox.offset[k]) * srcStride[k];
        d += (at[k] - dstBox.offset[k]) * dstStride[k];
      }
      uint8_t *mark = covered.data() + d;
      if (pass == 0) {
        if (std::find(mark, mark + run, uint8_t(1)) != mark + run)
          return false;
      } else {
        std::memcpy(dst + d, src + s, static_cast<size_t>(run) * sizeof(float));
        std::fill(mark, mark + run, uint8_t(1));
      }
      // Next run: an odometer over every dim but the last.
      size_t k = n > 0 ? n - 1 : 0;
      while (k > 0 && ++at[k - 1] == hi[k - 1]) {
        at[k - 1] = lo[k - 1];
        --k;
      }
      if (k == 0)
        break;
    }
  }
  return true;
}

int64_t LocalBoxes::numel() const {
  int64_t n = 1;
  for (int64_t d : localShape)
    n *= d;
  return n;
}

LocalBoxes boxesOf(const std::vector<std::vector<common::Chunk>> &runs) {
  LocalBoxes out;
  const size_t n = runs.size();
  // Where each run starts in the local tensor's dim.
  std::vector<std::vector<int64_t>> starts(n);
  out.localShape.assign(n, 0);
  bool empty = false;
  for (size_t k = 0; k < n; ++k) {
    for (const common::Chunk &r : runs[k]) {
      starts[k].push_back(out.localShape[k]);
      out.localShape[k] += r.size;
    }
    empty = empty || runs[k].empty();
  }
  if (empty)
    return out; // nothing held, no box
  std::vector<size_t> at(n, 0); // an odometer over the runs, last dim fastest
  while (true) {
    Slice g, l;
    for (size_t k = 0; k < n; ++k) {
      g.offset.push_back(runs[k][at[k]].offset);
      g.shape.push_back(runs[k][at[k]].size);
      l.offset.push_back(starts[k][at[k]]);
    }
    l.shape = g.shape;
    out.global.push_back(std::move(g));
    out.local.push_back(std::move(l));
    size_t k = n;
    while (k > 0 && ++at[k - 1] == runs[k - 1].size())
      at[--k] = 0;
    if (k == 0)
      break;
  }
  return out;
}

void extractBox(const LocalBoxes &boxes, size_t i, const float *local, std::vector<float> &out) {
  const Slice all{std::vector<int64_t>(boxes.localShape.size(), 0), boxes.localShape};
  out.assign(static_cast<size_t>(boxes.local[i].numel()), 0.0f);
  std::vector<uint8_t> covered(out.size(), 0);
  copyOverlap(local, all, out.data(), boxes.local[i], covered);
}

void placeBox(const LocalBoxes &boxes, size_t i, const float *box, float *local) {
  const Slice all{std::vector<int64_t>(boxes.localShape.size(), 0), boxes.localShape};
  std::vector<uint8_t> covered(static_cast<size_t>(boxes.numel()), 0);
  copyOverlap(box, boxes.local[i], local, all, covered);
}

Catalog::Catalog(const std::vector<ShardIndex> &shards) : shards_(shards) {
  for (size_t s = 0; s < shards.size(); ++s)
    for (size_t e = 0; e < shards[s].entries.size(); ++e)
      byKey_[{shards[s].entries[e].name, shards[s].entries[e].kind}].emplace_back(s, e);
}

Status Catalog::read(const std::string &dir, const std::string &name, Kind kind,
                     const std::vector<int64_t> &full, const Slice &want,
                     std::vector<float> &out) const {
  const std::string what = std::string(kindName(kind)) + " of '" + name + "'";
  auto it = byKey_.find({name, kind});
  if (it == byKey_.end())
    return invalidArgument("checkpoint '" + dir + "' has no " + kindName(kind) + " for param '" +
                           name + "'");
  const int64_t numel = want.numel();
  out.assign(static_cast<size_t>(numel), 0.0f);
  std::vector<uint8_t> covered(static_cast<size_t>(numel), 0);
  std::vector<float> data;
  std::string held; // the entries' slices, for a message
  size_t listed = 0;
  for (const auto &[s, e] : it->second) {
    const Entry &entry = shards_[s].entries[e];
    Slice box;
    if (std::string why = resolve(entry.slice, full, box); !why.empty())
      return invalidArgument("checkpoint '" + dir + "': the " + what + " in '" +
                             shards_[s].path + "' does not fit the param: " + why);
    if (entry.bytes != static_cast<uint64_t>(box.numel()) * sizeof(float))
      return invalidArgument("checkpoint '" + dir + "': " + what + " in '" + shards_[s].path +
                             "' has " + std::to_string(entry.bytes / sizeof(float)) +
                             " values but its slice " + describe(box) + " holds " +
                             std::to_string(box.numel()));
    // A message lists a few slices, however many shards there are.
    if (++listed <= 8)
      held += (held.empty() ? "" : " ") + describe(box);
    else if (listed == 9)
      held += " ...";
    if (box.offset == want.offset && box.shape == want.shape &&
        std::find(covered.begin(), covered.end(), uint8_t(1)) == covered.end()) {
      // The common case, the same layout as the save: straight into place.
      DMUON_RETURN_IF_ERROR(readEntry(shards_[s], entry, out.data()));
      std::fill(covered.begin(), covered.end(), uint8_t(1));
      continue;
    }
    bool overlaps = true; // else the entry is not worth reading
    for (size_t k = 0; k < box.shape.size() && overlaps; ++k)
      overlaps = std::max(box.offset[k], want.offset[k]) <
                 std::min(box.offset[k] + box.shape[k], want.offset[k] + want.shape[k]);
    if (!overlaps)
      continue;
    data.resize(static_cast<size_t>(box.numel()));
    DMUON_RETURN_IF_ERROR(readEntry(shards_[s], entry, data.data()));
    if (!copyOverlap(data.data(), box, out.data(), want, covered))
      return invalidArgument("checkpoint '" + dir + "' is corrupt: entries of the " + what +
                             " overlap (slices " + held + ")");
  }
  const int64_t missing = std::count(covered.begin(), covered.end(), uint8_t(0));
  if (missing > 0)
    return invalidArgument("checkpoint '" + dir + "': its " + what + " holds the slices " + held +
                           ", which leave " + std::to_string(missing) + " of the " +
                           std::to_string(numel) + " values of this rank's slice " +
                           describe(want) + " that no entry holds");
  return Status::ok();
}

std::vector<int64_t> rowShapeOf(std::vector<int64_t> shape, size_t firstColumnDim) {
  for (size_t d = firstColumnDim; d < shape.size(); ++d)
    shape[d] = 1;
  return shape;
}

LocalBoxes rowBoxesOf(const LocalBoxes &boxes, size_t firstColumnDim) {
  LocalBoxes rows = boxes;
  rows.localShape = rowShapeOf(rows.localShape, firstColumnDim);
  for (std::vector<Slice> *list : {&rows.global, &rows.local})
    for (Slice &s : *list)
      for (size_t d = firstColumnDim; d < s.shape.size(); ++d) {
        if (d < s.offset.size())
          s.offset[d] = 0;
        s.shape[d] = 1;
      }
  return rows;
}

} // namespace dmuon::rt::ckpt
