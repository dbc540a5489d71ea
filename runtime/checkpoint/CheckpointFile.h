// The on-disk checkpoint format (docs/checkpoint-format.md): a directory with
// one shard file per rank (CheckpointFile.cpp), and a manifest naming them
// (CheckpointManifest.cpp).
// Entries are keyed by param name, so a checkpoint does not depend on the
// mesh it was written under. Writes are atomic: a temporary file of a fresh
// name (created exclusively, never through a symlink), fsync, rename; the
// manifest is replaced last. Each shard records the save it belongs to, and
// a save holds the directory's lock throughout, so neither a copied-in shard
// nor a second save at once can leave a manifest naming a foreign or missing
// shard.
#ifndef DMUON_RUNTIME_CHECKPOINT_CHECKPOINTFILE_H
#define DMUON_RUNTIME_CHECKPOINT_CHECKPOINTFILE_H

#include "base/Status.h"
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

// Which save a shard belongs to (shard format 3): the step and nonce its
// manifest records, and the rank whose shard it is. A load refuses a shard
// whose binding is not its manifest's: one copied in from another save.
struct SaveBinding {
  int64_t step = 0;
  uint64_t nonce = 0;
  uint32_t rank = 0;
};

// Writes one shard file atomically (a temp file, fsync, rename). `add`
// appends the bytes of each entry in order: `slice` of the param, row-major
// fp32.
class ShardWriter {
public:
  Status open(const std::string &path, const SaveBinding &save);
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
  uint32_t version = 0;
  SaveBinding save; // format 3 and later
  std::vector<Entry> entries;
};

Status readShardIndex(const std::string &path, ShardIndex &out);
// The two halves of readShardIndex without the file, for the fuzzer: the
// header of a shard of `size` bytes (24 bytes up to format 2, 48 from
// format 3; `header` holds the file's first min(size, 48) bytes, zeros
// after), then the index it points to (the `size - indexOffset` bytes from
// indexOffset).
inline constexpr size_t kShardHeaderBytes = 48;
struct ShardHeader {
  uint32_t version = 0, count = 0;
  uint64_t indexOffset = 0;
  SaveBinding save; // format 3 and later
};
Status parseShardHeader(const std::string &path, const uint8_t (&header)[kShardHeaderBytes],
                        uint64_t size, ShardHeader &out);
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
  bool hasNonce = false;           // older manifests (shard format 2 and before) have none
  uint64_t nonce = 0;              // the save's: every shard records it (SaveBinding)
  std::vector<std::string> shards; // file names inside the directory
};

// A manifest is read whole and never more: 64 MiB holds the shard lines of
// about 700,000 ranks; a save whose manifest would be larger is refused.
inline constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;

Status writeManifest(const std::string &dir, const Manifest &m);
Status readManifest(const std::string &dir, Manifest &out);
std::string manifestPath(const std::string &dir);
// The text of a manifest read from `path` (for messages), checked whole:
// header, end line and checksum, every line and value, each key once, the
// shard names (one per rank of the saving run, none twice).
Status parseManifest(const std::string &text, const std::string &path, Manifest &out);
// Whether `shard`, the manifest's shard of `rank`, belongs to the save the
// manifest of `dir` records (its step, nonce and rank): refuses, naming the
// shard and what differs, a shard that another save wrote.
Status checkShardBelongs(const ShardIndex &shard, const std::string &dir, const Manifest &m,
                         size_t rank);
// Removes shard files in `dir` that `m` does not name (older checkpoints)
// and the temp files of saves that died. Only while holding the directory's
// lock for a save: no other save's files are then in progress.
void removeStaleShards(const std::string &dir, const Manifest &m);
Status ensureDirectory(const std::string &dir);

// An advisory lock on a checkpoint directory: flock on its lock file
// (kLockFileName, created by the first save and left there). A save holds it
// exclusively from before its first shard until its stale files are
// removed; a load shares it while it reads, so a save cannot remove the
// shards under it. Never waits: a lock held elsewhere is refused at once
// with DMUON_ERROR_INVALID_STATE, naming the directory. One rank of a run
// takes it (rank 0), for all. Advisory: only dmuon's saves and loads honour
// it.
inline constexpr const char *kLockFileName = "checkpoint.lock";
class DirectoryLock {
public:
  enum class Mode { Save, Load };
  Status acquire(const std::string &dir, Mode mode);
  void release();
  ~DirectoryLock() { release(); }

private:
  int fd_ = -1;
};

// Creates a new file for writing beside `path`, exclusively and never through
// a symlink: `path`.<pid>.<random>.tmp. Sets `tmp` and `fd`.
Status createTempFile(const std::string &path, std::string &tmp, int &fd);

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
