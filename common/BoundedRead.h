// Reading an input file whole, but never more than a limit: a huge file, a
// FIFO or /dev/zero is refused with a message instead of being read until
// memory runs out. The plan reader (plan/ReadFile.cpp) and dmuonc's
// frontends use it; checkpoints (runtime/checkpoint/CheckpointFile.cpp), whose files
// are only ever regular files, refuse anything else before reading a byte.
#ifndef DMUON_COMMON_BOUNDEDREAD_H
#define DMUON_COMMON_BOUNDEDREAD_H

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace dmuon::common {

// The largest plan: FlatBuffers offsets are 32-bit signed, so no plan buffer
// reaches 2 GiB (FLATBUFFERS_MAX_BUFFER_SIZE is 2^31 - 1).
inline constexpr uint64_t kMaxPlanBytes = (uint64_t(1) << 31) - 2;

// A limit for a message, to the nearest GiB or MiB: "2 GiB", "64 MiB".
inline std::string bytesText(uint64_t bytes) {
  if (bytes >= (uint64_t(1) << 30))
    return std::to_string((bytes + (uint64_t(1) << 29)) >> 30) + " GiB";
  if (bytes >= (uint64_t(1) << 20))
    return std::to_string((bytes + (uint64_t(1) << 19)) >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// Reads `path` into `out` (a std::string or std::vector of bytes). Returns
// empty on success, else the reason ("larger than 2 GiB (the limit for ...)"
// when the file holds more than `maxBytes`). `what` names the kind of file
// for that message, e.g. "a plan".
template <typename Buffer>
std::string readFileBounded(const std::string &path, uint64_t maxBytes, const char *what,
                            Buffer &out) {
  out.clear();
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return std::strerror(errno);
  auto tooLarge = [&] {
    return "the file is larger than " + bytesText(maxBytes) + ", the limit for " + what;
  };
  struct stat st;
  if (fstat(fileno(f), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      std::fclose(f);
      return std::strerror(EISDIR);
    }
    // A regular file's size is known up front; anything else (a FIFO, a
    // device) is read until the limit.
    if (S_ISREG(st.st_mode)) {
      if (static_cast<uint64_t>(st.st_size) > maxBytes) {
        std::fclose(f);
        return tooLarge();
      }
      out.reserve(static_cast<size_t>(st.st_size));
    }
  }
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (n > maxBytes - out.size()) {
      std::fclose(f);
      out.clear();
      out.shrink_to_fit();
      return tooLarge();
    }
    out.insert(out.end(), chunk, chunk + n);
  }
  if (std::ferror(f)) {
    int err = errno;
    std::fclose(f);
    out.clear();
    return err ? std::strerror(err) : "read error";
  }
  std::fclose(f);
  return {};
}

// What a file that is not a regular file is, for a message.
inline const char *fileKind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

// Opens `path` for reading if it is a regular file; returns the descriptor
// (close-on-exec, blocking) or -1 with the reason in `why`. O_NONBLOCK makes
// opening a FIFO that no one writes return at once instead of waiting for a
// writer; fstat then refuses it (and devices, directories, sockets) before
// anything is read.
inline int openRegularFile(const std::string &path, std::string &why) {
  why.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = std::string("it is ") + fileKind(st.st_mode) + ", not a regular file";
  if (!why.empty()) {
    ::close(fd);
    return -1;
  }
  // Reads of a regular file never block; the flag only mattered for open.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// readFileBounded for a regular file only (openRegularFile): never blocks on
// a FIFO, never reads a device.
template <typename Buffer>
std::string readRegularFileBounded(const std::string &path, uint64_t maxBytes, const char *what,
                                   Buffer &out) {
  out.clear();
  std::string why;
  int fd = openRegularFile(path, why);
  if (fd < 0)
    return why;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return "the file is larger than " + bytesText(maxBytes) + ", the limit for " + what;
  }
  // The size known up front; a file that grows meanwhile is cut at it.
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t r = ::read(fd, reinterpret_cast<char *>(&out[0]) + done, out.size() - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      why = r < 0 ? std::strerror(errno) : "the file shrank while it was read";
      ::close(fd);
      out.clear();
      return why;
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return {};
}

} // namespace dmuon::common

#endif
