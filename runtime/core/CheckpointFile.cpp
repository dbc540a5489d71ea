#include "core/CheckpointFile.h"

#include "common/HyperRanges.h"
#include "common/ParamNames.h"
#include "common/PlanRules.h"
#include "plan/PlanFile.h"

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dmuon::rt::ckpt {

namespace {

constexpr char kShardMagic[8] = {'D', 'M', 'C', 'K', 'S', 'H', 'R', 'D'};
constexpr uint32_t kShardVersion = 1;
constexpr const char *kManifestName = "checkpoint";
constexpr const char *kManifestHeader = "dmuon-checkpoint 1";
// Guards against absurd sizes in a corrupt index before allocating.
constexpr uint32_t kMaxEntries = 1u << 26;
// Names are stored with a 16-bit length; the plan allows no longer ones.
constexpr uint32_t kMaxNameBytes = common::kMaxParamNameBytes;
static_assert(kMaxNameBytes <= UINT16_MAX);

Status ioError(const std::string &path, const std::string &what) {
  return {DMUON_ERROR_IO, "'" + path + "': " + what + ": " + std::strerror(errno)};
}

Status corrupt(const std::string &path, const std::string &what) {
  return {DMUON_ERROR_INVALID_ARGUMENT, "checkpoint '" + path + "' is corrupt: " + what};
}

Status writeAll(int fd, const void *data, size_t n, const std::string &path) {
  const auto *p = static_cast<const uint8_t *>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return ioError(path, "write failed");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Status readAt(int fd, void *data, size_t n, uint64_t offset, const std::string &path) {
  auto *p = static_cast<uint8_t *>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return ioError(path, "read failed");
    }
    if (r == 0)
      return corrupt(path, "file ends early");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::ok();
}

void syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

template <typename T> void put(std::string &buf, T v) {
  buf.append(reinterpret_cast<const char *>(&v), sizeof v);
}

template <typename T> bool get(const uint8_t *&p, const uint8_t *end, T &v) {
  if (static_cast<size_t>(end - p) < sizeof v)
    return false;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return true;
}

} // namespace

const char *kindName(Kind k) {
  switch (k) {
  case Kind::Value:
    return "value";
  case Kind::Momentum:
    return "momentum";
  case Kind::AdamM:
    return "adam_m";
  case Kind::AdamV:
    return "adam_v";
  }
  return "?";
}

bool crashInjectedFor(int rank) {
  const char *spec = std::getenv("DMUON_FAULT_INJECT");
  if (!spec)
    return false;
  int r = -1;
  return std::sscanf(spec, "save_crash_rank:%d", &r) == 1 && r == rank;
}

// ------------------------------------------------------------------ shards

Status ShardWriter::open(const std::string &path) {
  path_ = path;
  tmp_ = path + ".tmp";
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return ioError(tmp_, "cannot create");
  // Header: magic, version, then the index offset patched at commit.
  std::string header(kShardMagic, sizeof kShardMagic);
  put<uint32_t>(header, kShardVersion);
  put<uint32_t>(header, 0);
  put<uint64_t>(header, 0);
  offset_ = header.size();
  return writeAll(fd_, header.data(), header.size(), tmp_);
}

Status ShardWriter::add(const std::string &name, Kind kind, const void *data, uint64_t bytes) {
  // The reader refuses what the index cannot hold: fail the save instead.
  if (std::string why = common::paramNameProblem(name); !why.empty())
    return {DMUON_ERROR_INVALID_ARGUMENT,
            "cannot save param '" + common::printableName(name) + "': its name " + why};
  Entry e{name, kind, offset_, bytes,
          planfile::fnv1a64(static_cast<const uint8_t *>(data), static_cast<size_t>(bytes))};
  DMUON_RETURN_IF_ERROR(writeAll(fd_, data, static_cast<size_t>(bytes), tmp_));
  offset_ += bytes;
  entries_.push_back(std::move(e));
  return Status::ok();
}

Status ShardWriter::commit() {
  std::string index;
  for (const Entry &e : entries_) {
    put<uint16_t>(index, static_cast<uint16_t>(e.name.size()));
    index += e.name;
    put<uint8_t>(index, static_cast<uint8_t>(e.kind));
    put<uint64_t>(index, e.offset);
    put<uint64_t>(index, e.bytes);
    put<uint64_t>(index, e.hash);
  }
  put<uint64_t>(index, planfile::fnv1a64(reinterpret_cast<const uint8_t *>(index.data()),
                                         index.size()));
  const uint64_t indexOffset = offset_;
  DMUON_RETURN_IF_ERROR(writeAll(fd_, index.data(), index.size(), tmp_));
  std::string patch;
  put<uint32_t>(patch, static_cast<uint32_t>(entries_.size()));
  put<uint64_t>(patch, indexOffset);
  if (::pwrite(fd_, patch.data(), patch.size(), sizeof kShardMagic + 4) !=
      static_cast<ssize_t>(patch.size()))
    return ioError(tmp_, "write failed");
  if (::fsync(fd_) != 0)
    return ioError(tmp_, "fsync failed");
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    return ioError(path_, "rename failed");
  syncDirectory(directoryOf(path_));
  return Status::ok();
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

Status readShardIndex(const std::string &path, ShardIndex &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ioError(path, "cannot open");
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint8_t header[24];
  Status s = size < sizeof header ? corrupt(path, "shorter than its header")
                                  : readAt(fd, header, sizeof header, 0, path);
  if (s && std::memcmp(header, kShardMagic, sizeof kShardMagic) != 0)
    s = corrupt(path, "not a dmuon checkpoint shard (bad magic)");
  uint32_t version = 0, count = 0;
  uint64_t indexOffset = 0;
  if (s) {
    std::memcpy(&version, header + 8, 4);
    std::memcpy(&count, header + 12, 4);
    std::memcpy(&indexOffset, header + 16, 8);
    if (version != kShardVersion)
      s = corrupt(path, "shard format " + std::to_string(version) + " is not " +
                            std::to_string(kShardVersion));
    else if (count > kMaxEntries || indexOffset < sizeof header || indexOffset > size)
      s = corrupt(path, "index out of range (truncated?)");
    // Bound the index by what `count` entries can take before allocating it.
    else if (size - indexOffset > uint64_t(count) * (2 + kMaxNameBytes + 1 + 24) + 8)
      s = corrupt(path, "index larger than its entry count allows");
  }
  std::vector<uint8_t> index;
  if (s) {
    index.resize(static_cast<size_t>(size - indexOffset));
    s = readAt(fd, index.data(), index.size(), indexOffset, path);
  }
  ::close(fd);
  DMUON_RETURN_IF_ERROR(s);
  if (index.size() < 8)
    return corrupt(path, "index truncated");
  uint64_t want;
  std::memcpy(&want, index.data() + index.size() - 8, 8);
  if (planfile::fnv1a64(index.data(), index.size() - 8) != want)
    return corrupt(path, "index checksum mismatch");
  out = ShardIndex{};
  out.path = path;
  const uint8_t *p = index.data(), *end = index.data() + index.size() - 8;
  for (uint32_t i = 0; i < count; ++i) {
    Entry e;
    uint16_t len;
    uint8_t kind;
    if (!get(p, end, len) || len > kMaxNameBytes || static_cast<size_t>(end - p) < len)
      return corrupt(path, "index entry " + std::to_string(i) + " is malformed");
    e.name.assign(reinterpret_cast<const char *>(p), len);
    p += len;
    if (std::string why = common::paramNameProblem(e.name); !why.empty())
      return corrupt(path, "index entry " + std::to_string(i) + ": the name '" +
                               common::printableName(e.name) + "' " + why);
    if (!get(p, end, kind) || kind > static_cast<uint8_t>(Kind::AdamV) || !get(p, end, e.offset) ||
        !get(p, end, e.bytes) || !get(p, end, e.hash))
      return corrupt(path, "index entry '" + e.name + "' is malformed");
    e.kind = static_cast<Kind>(kind);
    if (e.offset > indexOffset || e.bytes > indexOffset - e.offset)
      return corrupt(path, "entry '" + e.name + "' lies outside the data");
    out.byKey[{e.name, e.kind}] = out.entries.size();
    out.entries.push_back(std::move(e));
  }
  return Status::ok();
}

Status readEntry(const ShardIndex &shard, const Entry &e, void *out) {
  int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ioError(shard.path, "cannot open");
  Status s = readAt(fd, out, static_cast<size_t>(e.bytes), e.offset, shard.path);
  ::close(fd);
  DMUON_RETURN_IF_ERROR(s);
  if (planfile::fnv1a64(static_cast<const uint8_t *>(out), static_cast<size_t>(e.bytes)) != e.hash)
    return corrupt(shard.path, std::string("checksum mismatch in ") + kindName(e.kind) + " of '" +
                                   e.name + "'");
  return Status::ok();
}

// ---------------------------------------------------------------- manifest

Status writeManifest(const std::string &dir, const Manifest &m) {
  std::ostringstream body;
  body << kManifestHeader << "\n"
       << "step " << m.step << "\n"
       << "adamw_step " << m.adamwStep << "\n";
  char hex[40];
  std::snprintf(hex, sizeof hex, "0x%016" PRIx64, m.planFingerprint);
  body << "plan_fingerprint " << hex << "\n";
  std::snprintf(hex, sizeof hex, "0x%016" PRIx64, m.modelFingerprint);
  body << "model_fingerprint " << hex << "\n"
       << "world_size " << m.worldSize << "\n"
       << "steps_applied " << m.stepsApplied << "\n"
       << "steps_skipped " << m.stepsSkipped << "\n";
  if (m.hasHyper) {
    // Hex floats: the values come back bit for bit.
    const std::pair<const char *, double> hyper[] = {
        {"lr", m.hyper.lr},
        {"momentum", m.hyper.momentum},
        {"weight_decay", m.hyper.weight_decay},
        {"adamw_lr", m.hyper.adamw_lr},
        {"adamw_weight_decay", m.hyper.adamw_weight_decay}};
    for (const auto &[key, value] : hyper) {
      std::snprintf(hex, sizeof hex, "%a", value);
      body << "hyper_" << key << " " << hex << "\n";
    }
  }
  for (const std::string &s : m.shards)
    body << "shard " << s << "\n";
  std::string text = body.str();
  std::snprintf(hex, sizeof hex, "0x%016" PRIx64,
                planfile::fnv1a64(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  text += std::string("end ") + hex + "\n";

  const std::string path = dir + "/" + kManifestName, tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return ioError(tmp, "cannot create");
  Status s = writeAll(fd, text.data(), text.size(), tmp);
  if (s && ::fsync(fd) != 0)
    s = ioError(tmp, "fsync failed");
  ::close(fd);
  if (s && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ioError(path, "rename failed");
  if (!s) {
    ::unlink(tmp.c_str());
    return s;
  }
  syncDirectory(dir);
  return Status::ok();
}

Status readManifest(const std::string &dir, Manifest &out) {
  const std::string path = dir + "/" + kManifestName;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return ioError(path, "cannot open checkpoint manifest");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 26))
    text.append(buf, n);
  std::fclose(f);
  size_t endPos = text.rfind("end 0x");
  if (text.rfind(kManifestHeader, 0) != 0)
    return corrupt(path, "not a dmuon checkpoint manifest");
  if (endPos == std::string::npos)
    return corrupt(path, "manifest is truncated (no end line)");
  uint64_t want = std::strtoull(text.c_str() + endPos + 4, nullptr, 16);
  if (planfile::fnv1a64(reinterpret_cast<const uint8_t *>(text.data()), endPos) != want)
    return corrupt(path, "manifest checksum mismatch");
  out = Manifest{};
  std::istringstream in(text.substr(0, endPos));
  std::string line;
  std::getline(in, line); // header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, value, extra;
    ls >> key >> value >> extra;
    // Each value checked whole and in range: a manifest is input like any.
    auto bad = [&](const std::string &what) {
      return corrupt(path, "manifest line '" + common::printableName(line) + "': " + what);
    };
    auto count = [&](int64_t max, int64_t &field) {
      char *end = nullptr;
      errno = 0;
      long long v = value.empty() || value[0] == '-' || value[0] == '+'
                        ? -1
                        : std::strtoll(value.c_str(), &end, 10);
      if (v < 0 || errno != 0 || !end || *end != '\0' || v > max)
        return false;
      field = v;
      return true;
    };
    auto hex64 = [&](uint64_t &field) {
      char *end = nullptr;
      errno = 0;
      if (value.size() != 18 || value.compare(0, 2, "0x") != 0)
        return false;
      field = std::strtoull(value.c_str() + 2, &end, 16);
      return errno == 0 && end && *end == '\0';
    };
    if (!extra.empty())
      return bad("expected '<key> <value>'");
    constexpr int64_t kMaxStep = INT64_MAX;
    if (key == "step") {
      if (!count(kMaxStep, out.step))
        return bad("step must be an integer >= 0");
    } else if (key == "adamw_step") {
      if (!count(kMaxStep, out.adamwStep))
        return bad("adamw_step must be an integer >= 0");
    } else if (key == "plan_fingerprint") {
      if (!hex64(out.planFingerprint))
        return bad("plan_fingerprint must be 0x and 16 hex digits");
    } else if (key == "model_fingerprint") {
      if (!hex64(out.modelFingerprint))
        return bad("model_fingerprint must be 0x and 16 hex digits");
    } else if (key == "world_size") {
      int64_t world = 0;
      if (!count(common::kMaxWorldSize, world) || world < 1)
        return bad("world_size must be an integer between 1 and " +
                   std::to_string(common::kMaxWorldSize));
      out.worldSize = static_cast<int>(world);
    } else if (key == "steps_applied") {
      if (!count(kMaxStep, out.stepsApplied))
        return bad("steps_applied must be an integer >= 0");
    } else if (key == "steps_skipped") {
      if (!count(kMaxStep, out.stepsSkipped))
        return bad("steps_skipped must be an integer >= 0");
    } else if (key.rfind("hyper_", 0) == 0) {
      const std::pair<double *, const common::HyperRange *> slot =
          key == "hyper_lr"                   ? std::pair{&out.hyper.lr, &common::kRateRange}
          : key == "hyper_momentum"           ? std::pair{&out.hyper.momentum, &common::kDecayRange}
          : key == "hyper_weight_decay"       ? std::pair{&out.hyper.weight_decay, &common::kRateRange}
          : key == "hyper_adamw_lr"           ? std::pair{&out.hyper.adamw_lr, &common::kRateRange}
          : key == "hyper_adamw_weight_decay" ? std::pair{&out.hyper.adamw_weight_decay,
                                                          &common::kRateRange}
                                              : std::pair<double *, const common::HyperRange *>{};
      if (!slot.first)
        return bad("unknown key");
      char *end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || !end || *end != '\0')
        return bad(key + " must be a number");
      if (std::string e = common::hyperRangeError(key.c_str(), v, *slot.second); !e.empty())
        return bad(e);
      *slot.first = v;
      out.hasHyper = true;
    } else if (key == "shard") {
      if (value.empty() || value.find('/') != std::string::npos)
        return corrupt(path, "bad shard name '" + common::printableName(value) + "'");
      out.shards.push_back(value);
    } else {
      return corrupt(path, "unknown manifest line '" + common::printableName(line) + "'");
    }
  }
  return Status::ok();
}

void removeStaleShards(const std::string &dir, const Manifest &m) {
  std::set<std::string> keep(m.shards.begin(), m.shards.end());
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (dirent *ent = ::readdir(d)) {
    std::string name = ent->d_name;
    bool isShard = name.rfind("shard-", 0) == 0 &&
                   (name.size() > 5 && (name.compare(name.size() - 5, 5, ".dmck") == 0 ||
                                        name.compare(name.size() - 4, 4, ".tmp") == 0));
    if (isShard && !keep.count(name))
      ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

Status ensureDirectory(const std::string &dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return ioError(dir, "cannot create checkpoint directory");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return {DMUON_ERROR_IO, "'" + dir + "' exists and is not a directory"};
  return Status::ok();
}

} // namespace dmuon::rt::ckpt
