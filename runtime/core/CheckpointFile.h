// The on-disk checkpoint format (docs/checkpoint-format.md): a directory with
// one shard file per rank that owned something, and a manifest naming them.
// Entries are keyed by param name, so a checkpoint does not depend on the
// mesh it was written under. Writes are atomic: temporary name, fsync,
// rename; the manifest is replaced last.
#ifndef DMUON_RUNTIME_CORE_CHECKPOINTFILE_H
#define DMUON_RUNTIME_CORE_CHECKPOINTFILE_H

#include "core/Status.h"
#include "dmuon/dmuon.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dmuon::rt::ckpt {

enum class Kind : uint8_t { Value = 0, Momentum = 1, AdamM = 2, AdamV = 3 };
const char *kindName(Kind k);

struct Entry {
  std::string name;
  Kind kind = Kind::Value;
  uint64_t offset = 0, bytes = 0, hash = 0;
};

// Writes one shard file atomically (tmp, fsync, rename). `write` appends the
// bytes of each entry in order through the callback.
class ShardWriter {
public:
  Status open(const std::string &path);
  Status add(const std::string &name, Kind kind, const void *data, uint64_t bytes);
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
  std::map<std::pair<std::string, Kind>, size_t> byKey;
};

Status readShardIndex(const std::string &path, ShardIndex &out);
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

Status writeManifest(const std::string &dir, const Manifest &m);
Status readManifest(const std::string &dir, Manifest &out);
// Removes shard files in `dir` that `m` does not name (older checkpoints).
void removeStaleShards(const std::string &dir, const Manifest &m);
Status ensureDirectory(const std::string &dir);

// Set DMUON_FAULT_INJECT=save_crash_rank:<r> to make rank r exit half-way
// through writing its shard (tests of atomicity only).
bool crashInjectedFor(int rank);

} // namespace dmuon::rt::ckpt

#endif
