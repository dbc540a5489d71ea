#include "checkpoint/CheckpointFile.h"

#include "common/BoundedRead.h"
#include "common/ParamNames.h"
#include "plan/PlanFile.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dmuon::rt::ckpt {

namespace {

constexpr char kShardMagic[8] = {'D', 'M', 'C', 'K', 'S', 'H', 'R', 'D'};
// 3: the header records the save the shard belongs to (SaveBinding).
// 2: every entry records its slice of the param (model-parallel shards);
//    still read, from checkpoints whose manifest records no nonce.
// 1: entries hold whole params; still read, likewise.
constexpr uint32_t kShardVersion = 3;
// The header up to format 2: magic, version, entry count, index offset.
constexpr uint64_t kShortHeaderBytes = 24;
static_assert(kShardHeaderBytes == kShortHeaderBytes + 24);
// Guards against absurd sizes in a corrupt index before allocating.
constexpr uint32_t kMaxEntries = 1u << 26;
// Names are stored with a 16-bit length; the plan allows no longer ones.
constexpr uint32_t kMaxNameBytes = common::kMaxParamNameBytes;
static_assert(kMaxNameBytes <= UINT16_MAX);
// The most an index entry takes: name length, name, kind, offset, bytes,
// hash, then (format 2) the slice's dim count and an offset and extent per dim.
constexpr uint64_t kMaxEntryBytes = 2 + kMaxNameBytes + 1 + 24 + 1 + 16 * DMUON_MAX_DIMS;

} // namespace

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

void syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

namespace {

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

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
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

int64_t Slice::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

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
  case Kind::NorMuonV:
    return "normuon_v";
  case Kind::SoapExpAvg:
    return "soap_exp_avg";
  case Kind::SoapExpAvgSq:
    return "soap_exp_avg_sq";
  case Kind::SoapLeft:
    return "soap_left";
  case Kind::SoapLeftBasis:
    return "soap_left_basis";
  case Kind::SoapRight:
    return "soap_right";
  case Kind::SoapRightBasis:
    return "soap_right_basis";
  case Kind::ShampooFiltered:
    return "shampoo_filtered_grad";
  case Kind::ShampooGraftV:
    return "shampoo_graft_v";
  case Kind::ShampooLeft:
    return "shampoo_left";
  case Kind::ShampooLeftRoot:
    return "shampoo_left_root";
  case Kind::ShampooRight:
    return "shampoo_right";
  case Kind::ShampooRightRoot:
    return "shampoo_right_root";
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

Status createTempFile(const std::string &path, std::string &tmp, int &fd) {
  // A fixed name would let whoever can write the directory plant a symlink
  // there and have the save overwrite its target; O_EXCL never opens what is
  // there (O_NOFOLLOW says so twice), and a fresh name per writer keeps two
  // saves from writing, or removing, each other's temp files.
  static std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const uint64_t token = (uint64_t(entropy()) << 32) ^ entropy();
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, ".%ld.%016" PRIx64 ".tmp", static_cast<long>(::getpid()),
                  token);
    tmp = path + suffix;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0)
      return Status::ok();
    if (errno != EEXIST)
      break;
  }
  return ioError(tmp, "cannot create");
}

Status ShardWriter::open(const std::string &path, const SaveBinding &save) {
  path_ = path;
  DMUON_RETURN_IF_ERROR(createTempFile(path, tmp_, fd_));
  // Header: magic, version, the entry count and index offset patched at
  // commit, then the save the shard belongs to.
  std::string header(kShardMagic, sizeof kShardMagic);
  put<uint32_t>(header, kShardVersion);
  put<uint32_t>(header, 0);
  put<uint64_t>(header, 0);
  put<int64_t>(header, save.step);
  put<uint64_t>(header, save.nonce);
  put<uint32_t>(header, save.rank);
  put<uint32_t>(header, 0); // reserved
  offset_ = header.size();
  return writeAll(fd_, header.data(), header.size(), tmp_);
}

Status ShardWriter::add(const std::string &name, Kind kind, const Slice &slice, const void *data,
                        uint64_t bytes) {
  // The reader refuses what the index cannot hold: fail the save instead.
  if (std::string why = common::paramNameProblem(name); !why.empty())
    return {DMUON_ERROR_INVALID_ARGUMENT,
            "cannot save param '" + common::printableName(name) + "': its name " + why};
  if (slice.shape.size() > DMUON_MAX_DIMS || slice.offset.size() != slice.shape.size() ||
      static_cast<uint64_t>(slice.numel()) * sizeof(float) != bytes)
    return {DMUON_ERROR_INTERNAL, "checkpoint entry of '" + name + "': " + std::to_string(bytes) +
                                      " bytes for a slice of " + std::to_string(slice.numel()) +
                                      " values"};
  Entry e{name,  kind,
          slice, offset_,
          bytes, planfile::fnv1a64(static_cast<const uint8_t *>(data), static_cast<size_t>(bytes))};
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
    put<uint8_t>(index, static_cast<uint8_t>(e.slice.shape.size()));
    for (size_t k = 0; k < e.slice.shape.size(); ++k) {
      put<int64_t>(index, e.slice.offset[k]);
      put<int64_t>(index, e.slice.shape[k]);
    }
  }
  put<uint64_t>(index,
                planfile::fnv1a64(reinterpret_cast<const uint8_t *>(index.data()), index.size()));
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

Status parseShardHeader(const std::string &path, const uint8_t (&header)[kShardHeaderBytes],
                        uint64_t size, ShardHeader &out) {
  if (size < kShortHeaderBytes)
    return corrupt(path, "shorter than its header");
  if (std::memcmp(header, kShardMagic, sizeof kShardMagic) != 0)
    return corrupt(path, "not a dmuon checkpoint shard (bad magic)");
  out = ShardHeader{};
  std::memcpy(&out.version, header + 8, 4);
  std::memcpy(&out.count, header + 12, 4);
  std::memcpy(&out.indexOffset, header + 16, 8);
  if (out.version < 1 || out.version > kShardVersion)
    return corrupt(path, "shard format " + std::to_string(out.version) +
                             " is not one this runtime reads (1 to " +
                             std::to_string(kShardVersion) + ")");
  uint64_t headerBytes = kShortHeaderBytes;
  if (out.version >= 3) {
    headerBytes = kShardHeaderBytes;
    uint32_t reserved = 0;
    if (size < headerBytes)
      return corrupt(path, "shorter than its header");
    std::memcpy(&out.save.step, header + 24, 8);
    std::memcpy(&out.save.nonce, header + 32, 8);
    std::memcpy(&out.save.rank, header + 40, 4);
    std::memcpy(&reserved, header + 44, 4);
    if (out.save.step < 0 || reserved != 0)
      return corrupt(path, "the header's save record is malformed");
  }
  if (out.count > kMaxEntries || out.indexOffset < headerBytes || out.indexOffset > size)
    return corrupt(path, "index out of range (truncated?)");
  // Bound the index by what `count` entries can take before allocating it.
  if (size - out.indexOffset > uint64_t(out.count) * kMaxEntryBytes + 8)
    return corrupt(path, "index larger than its entry count allows");
  return Status::ok();
}

Status parseShardIndex(const std::string &path, const ShardHeader &h,
                       const std::vector<uint8_t> &index, ShardIndex &out) {
  if (index.size() < 8)
    return corrupt(path, "index truncated");
  uint64_t want;
  std::memcpy(&want, index.data() + index.size() - 8, 8);
  if (planfile::fnv1a64(index.data(), index.size() - 8) != want)
    return corrupt(path, "index checksum mismatch");
  out = ShardIndex{};
  out.path = path;
  out.version = h.version;
  out.save = h.save;
  const uint8_t *p = index.data(), *end = index.data() + index.size() - 8;
  for (uint32_t i = 0; i < h.count; ++i) {
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
    if (!get(p, end, kind) || kind > static_cast<uint8_t>(kLastKind) || !get(p, end, e.offset) ||
        !get(p, end, e.bytes) || !get(p, end, e.hash))
      return corrupt(path, "index entry '" + e.name + "' is malformed");
    e.kind = static_cast<Kind>(kind);
    if (e.offset > h.indexOffset || e.bytes > h.indexOffset - e.offset)
      return corrupt(path, "entry '" + e.name + "' lies outside the data");
    if (h.version >= 2) {
      uint8_t ndim;
      if (!get(p, end, ndim) || ndim > DMUON_MAX_DIMS)
        return corrupt(path, "entry '" + e.name + "' has a malformed slice");
      // Extents >= 0 whose product, in fp32 values, is the entry's size
      // (checked for overflow: the index is input like any).
      uint64_t numel = 1;
      for (uint8_t k = 0; k < ndim; ++k) {
        int64_t offset, extent;
        if (!get(p, end, offset) || !get(p, end, extent) || offset < 0 || extent < 0 ||
            __builtin_mul_overflow(numel, static_cast<uint64_t>(extent), &numel))
          return corrupt(path, "entry '" + e.name + "' has a malformed slice");
        e.slice.offset.push_back(offset);
        e.slice.shape.push_back(extent);
      }
      uint64_t bytes;
      if (__builtin_mul_overflow(numel, uint64_t(sizeof(float)), &bytes) || bytes != e.bytes)
        return corrupt(path, "entry '" + e.name + "' holds " + std::to_string(e.bytes) +
                                 " bytes, but its slice " + std::to_string(numel) + " fp32 values");
    }
    out.entries.push_back(std::move(e));
  }
  if (p != end)
    return corrupt(path, "index has bytes after its last entry");
  return Status::ok();
}

Status readShardIndex(const std::string &path, ShardIndex &out) {
  std::string why;
  int fd = common::openRegularFile(path, why);
  if (fd < 0)
    return {DMUON_ERROR_IO, "'" + path + "': cannot open checkpoint shard: " + why};
  struct stat st {};
  Status s = ::fstat(fd, &st) == 0 ? Status::ok() : ioError(path, "cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint8_t header[kShardHeaderBytes] = {};
  ShardHeader h;
  if (s)
    s = size < kShortHeaderBytes
            ? corrupt(path, "shorter than its header")
            : readAt(fd, header, static_cast<size_t>(std::min<uint64_t>(size, sizeof header)), 0,
                     path);
  if (s)
    s = parseShardHeader(path, header, size, h);
  std::vector<uint8_t> index;
  if (s) {
    index.resize(static_cast<size_t>(size - h.indexOffset));
    s = readAt(fd, index.data(), index.size(), h.indexOffset, path);
  }
  ::close(fd);
  DMUON_RETURN_IF_ERROR(s);
  return parseShardIndex(path, h, index, out);
}

Status readEntry(const ShardIndex &shard, const Entry &e, void *out) {
  std::string why;
  int fd = common::openRegularFile(shard.path, why);
  if (fd < 0)
    return {DMUON_ERROR_IO, "'" + shard.path + "': cannot open checkpoint shard: " + why};
  Status s = readAt(fd, out, static_cast<size_t>(e.bytes), e.offset, shard.path);
  ::close(fd);
  DMUON_RETURN_IF_ERROR(s);
  if (planfile::fnv1a64(static_cast<const uint8_t *>(out), static_cast<size_t>(e.bytes)) != e.hash)
    return corrupt(shard.path, std::string("checksum mismatch in ") + kindName(e.kind) + " of '" +
                                   e.name + "'");
  return Status::ok();
}

Status checkShardBelongs(const ShardIndex &shard, const std::string &dir, const Manifest &m,
                         size_t rank) {
  const std::string manifest = manifestPath(dir);
  auto foreign = [&](const std::string &why) -> Status {
    return {DMUON_ERROR_INVALID_ARGUMENT,
            "checkpoint shard '" + shard.path + "' does not belong to the save that '" + manifest +
                "' records (a shard copied in from another checkpoint?): " + why};
  };
  if (!m.hasNonce)
    return shard.version < 3
               ? Status::ok() // a checkpoint from before shards recorded their save
               : foreign("the shard records save nonce " + hex64(shard.save.nonce) +
                         " (shard format " + std::to_string(shard.version) +
                         "), but the manifest records none: it is an older checkpoint's");
  if (shard.version < 3)
    return foreign("the shard is format " + std::to_string(shard.version) +
                   ", which records no save, but the manifest records save nonce " +
                   hex64(m.nonce) + ": the shard is an older checkpoint's");
  std::string why;
  auto differs = [&](const std::string &what) { why += (why.empty() ? "" : "; ") + what; };
  if (shard.save.step != m.step)
    differs("the shard is of step " + std::to_string(shard.save.step) + ", the manifest of step " +
            std::to_string(m.step));
  if (shard.save.nonce != m.nonce)
    differs("the shard records save nonce " + hex64(shard.save.nonce) + ", the manifest " +
            hex64(m.nonce));
  if (shard.save.rank != rank)
    differs("the shard is rank " + std::to_string(shard.save.rank) +
            "'s, the manifest names it for rank " + std::to_string(rank));
  return why.empty() ? Status::ok() : foreign(why);
}

Status DirectoryLock::acquire(const std::string &dir, Mode mode) {
  release();
  const std::string path = dir + "/" + kLockFileName;
  // Never truncated or written, so a symlink planted here can do no harm;
  // O_NOFOLLOW refuses one anyway, and O_NONBLOCK keeps a FIFO from blocking.
  constexpr int kFlags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | kFlags, 0644);
  if (fd < 0 && mode == Mode::Load) {
    // A directory this process cannot write (read-only, another user's):
    // share the lock if the file is there, else no save of ours can
    // remove shards under this load either.
    if (errno != EACCES && errno != EROFS && errno != ENOENT)
      return ioError(path, "cannot open the checkpoint directory's lock file");
    fd = ::open(path.c_str(), O_RDONLY | kFlags);
    if (fd < 0)
      return Status::ok();
  }
  if (fd < 0)
    return ioError(path, "cannot create the checkpoint directory's lock file");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {DMUON_ERROR_IO, "'" + path +
                                "': the checkpoint directory's lock file is not a "
                                "regular file"};
  }
  if (::flock(fd, (mode == Mode::Save ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return {DMUON_ERROR_INVALID_STATE,
              "checkpoint directory '" + dir + "' is in use by another checkpoint save" +
                  (mode == Mode::Save ? " or load" : "") + " (it holds '" + path + "'); " +
                  (mode == Mode::Save ? "save" : "load") + " after it has finished"};
    errno = err;
    return ioError(path, "cannot lock the checkpoint directory");
  }
  fd_ = fd;
  return Status::ok();
}

void DirectoryLock::release() {
  if (fd_ >= 0)
    ::close(fd_); // releases the flock
  fd_ = -1;
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
