// The on-disk checkpoint format (docs/checkpoint-format.md): a directory with
// one shard file per rank (CheckpointFile.cpp), and a manifest naming them
// (CheckpointManifest.cpp).
// Entries are keyed by param name, so a checkpoint does not depend on the
// mesh it was written under. Writes are atomic: temporary name, fsync,
// rename; the manifest is replaced last.
#ifndef DMUON_RUNTIME_CHECKPOINT_CHECKPOINTFILE_H
#define DMUON_RUNTIME_CHECKPOINT_CHECKPOINTFILE_H

#include "core/Status.h"
#include "dmuon/dmuon.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::rt::ckpt {

// NorMuonV: NorMuon's second moment, one per row of the matrix view (its
// entries' slices are the param's with the column dims collapsed to 1).
// The SOAP and Shampoo kinds are their rules' state (optim/Preconditioned.h):
// two arrays shaped like the values, then per side the statistics and the
// basis (SOAP: eigenvectors) or inverse root (Shampoo), each an entry of
// shape batch x d x d.
enum class Kind : uint8_t {
  Value = 0,
  Momentum = 1,
  AdamM = 2,
  AdamV = 3,
  NorMuonV = 4,
  SoapExpAvg = 5,
  SoapExpAvgSq = 6,
  SoapLeft = 7,
  SoapLeftBasis = 8,
  SoapRight = 9,
  SoapRightBasis = 10,
  ShampooFiltered = 11,
  ShampooGraftV = 12,
  ShampooLeft = 13,
  ShampooLeftRoot = 14,
  ShampooRight = 15,
  ShampooRightRoot = 16,
};
inline constexpr Kind kLastKind = Kind::ShampooRightRoot;
const char *kindName(Kind k);

// Which chunk of the full param an entry holds (checkpoint/CheckpointSlice.h):
// per tensor dim, its first index and its extent. Empty in format-1 shards,
// whose entries hold whole params.
struct Slice {
  std::vector<int64_t> offset, shape;
  int64_t numel() const; // of a resolved slice (ckpt::resolve)
};

struct Entry {
  std::string name;
  Kind kind = Kind::Value;
  Slice slice;
  uint64_t offset = 0, bytes = 0, hash = 0;
};

// Writes one shard file atomically (tmp, fsync, rename). `add` appends the
// bytes of each entry in order: `slice` of the param, row-major fp32.
class ShardWriter {
public:
  Status open(const std::string &path);
  Status add(const std::string &name, Kind kind, const Slice &slice, const void *data,
             uint64_t bytes);
  Status commit(); // index, fsync, rename
  ~ShardWriter();

private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
};

struct ShardIndex {
  std::string path;
  std::vector<Entry> entries;
};

Status readShardIndex(const std::string &path, ShardIndex &out);
// The two halves of readShardIndex without the file, for the fuzzer: the
// 24-byte header of a shard of `size` bytes, then the index it points to
// (the `size - indexOffset` bytes from indexOffset).
struct ShardHeader {
  uint32_t version = 0, count = 0;
  uint64_t indexOffset = 0;
};
Status parseShardHeader(const std::string &path, const uint8_t (&header)[24], uint64_t size,
                        ShardHeader &out);
Status parseShardIndex(const std::string &path, const ShardHeader &h,
                       const std::vector<uint8_t> &index, ShardIndex &out);
// Reads an entry's bytes and checks its hash.
Status readEntry(const ShardIndex &shard, const Entry &e, void *out);

struct Manifest {
  int64_t step = 0;
  int64_t adamwStep = 0;
  uint64_t planFingerprint = 0;
  uint64_t modelFingerprint = 0; // names and shapes of every param
  int worldSize = 0;
  int64_t stepsApplied = 0, stepsSkipped = 0;
  bool hasHyper = false; // older manifests have no hyper-parameter lines
  dmuon_hyper_params_t hyper{};
  std::vector<std::string> shards; // file names inside the directory
};

// A manifest is read whole and never more: 64 MiB holds the shard lines of
// about 700,000 ranks; a save whose manifest would be larger is refused.
inline constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;

Status writeManifest(const std::string &dir, const Manifest &m);
Status readManifest(const std::string &dir, Manifest &out);
// The text of a manifest read from `path` (for messages), checked whole:
// header, end line and checksum, every line and value, each key once, the
// shard names (one per rank of the saving run, none twice).
Status parseManifest(const std::string &text, const std::string &path, Manifest &out);
// Removes shard files in `dir` that `m` does not name (older checkpoints).
void removeStaleShards(const std::string &dir, const Manifest &m);
Status ensureDirectory(const std::string &dir);

// Shared by the shard and manifest code: an I/O error naming the file and
// errno's reason; a corrupt checkpoint file; every byte written (EINTR
// retried); a directory's entries made durable.
Status ioError(const std::string &path, const std::string &what);
Status corrupt(const std::string &path, const std::string &what);
Status writeAll(int fd, const void *data, size_t n, const std::string &path);
void syncDirectory(const std::string &dir);

// Set DMUON_FAULT_INJECT=save_crash_rank:<r> to make rank r exit half-way
// through writing its shard (tests of atomicity only).
bool crashInjectedFor(int rank);

} // namespace dmuon::rt::ckpt

#endif
