// The checkpoint manifest (docs/checkpoint-format.md): a short text file that
// names the shards of one save and its counters, replaced last and atomically,
// so it is the switch from one checkpoint to the next. Read back, every line
// and value is checked, and the work it can cause is bounded: its size, one
// shard per rank of the saving run, no shard named twice.
#include "checkpoint/CheckpointFile.h"

#include "common/BoundedRead.h"
#include "common/Hex.h"
#include "common/HyperRanges.h"
#include "common/ParamNames.h"
#include "common/PlanRules.h"
#include "plan/PlanFile.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <unistd.h>

namespace dmuon::rt::ckpt {

namespace {

constexpr const char *kManifestName = "checkpoint";
constexpr const char *kManifestHeader = "dmuon-checkpoint 1";

} // namespace

std::string manifestPath(const std::string &dir) { return dir + "/" + kManifestName; }

Status writeManifest(const std::string &dir, const Manifest &m) {
  std::ostringstream body;
  body << kManifestHeader << "\n"
       << "step " << m.step << "\n"
       << "adamw_step " << m.adamwStep << "\n";
  body << "plan_fingerprint " << common::hex64(m.planFingerprint) << "\n"
       << "model_fingerprint " << common::hex64(m.modelFingerprint) << "\n"
       << "world_size " << m.worldSize << "\n"
       << "steps_applied " << m.stepsApplied << "\n"
       << "steps_skipped " << m.stepsSkipped << "\n";
  if (m.hasNonce)
    body << "nonce " << common::hex64(m.nonce) << "\n";
  if (m.hasHyper) {
    // Hex floats: the values come back bit for bit.
    const std::pair<const char *, double> hyper[] = {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  {#name, m.hyper.name},
#include "common/HyperParams.def"
    };
    char hex[40];
    for (const auto &[key, value] : hyper) {
      std::snprintf(hex, sizeof hex, "%a", value);
      body << "hyper_" << key << " " << hex << "\n";
    }
  }
  for (const std::string &s : m.shards)
    body << "shard " << s << "\n";
  std::string text = body.str();
  text += "end " +
          common::hex64(
              planfile::fnv1a64(reinterpret_cast<const uint8_t *>(text.data()), text.size())) +
          "\n";
  if (text.size() > kMaxManifestBytes)
    return {DMUON_ERROR_UNSUPPORTED, "checkpoint '" + dir + "': the manifest of " +
                                         std::to_string(m.shards.size()) + " shards would take " +
                                         std::to_string(text.size()) + " bytes, over the " +
                                         common::bytesText(kMaxManifestBytes) + " a load reads"};

  const std::string path = manifestPath(dir);
  std::string tmp;
  int fd = -1;
  DMUON_RETURN_IF_ERROR(createTempFile(path, tmp, fd));
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

namespace {

// A shard name as the writer makes them (shard-….dmck): a plain file name in
// the checkpoint's directory, never a path, "..", or a control character.
bool validShardName(const std::string &name) {
  constexpr size_t kMaxFileName = 255; // NAME_MAX
  if (name.size() > kMaxFileName || name.rfind("shard-", 0) != 0 || name.size() < 11 ||
      name.compare(name.size() - 5, 5, ".dmck") != 0)
    return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.')
      return false;
  return true;
}

} // namespace

Status parseManifest(const std::string &text, const std::string &path, Manifest &out) {
  const std::string header = std::string(kManifestHeader) + "\n";
  if (text.rfind(header, 0) != 0)
    return corrupt(path, "not a dmuon checkpoint manifest");
  // The last line is "end 0x<16 hex digits>": the checksum of all above it.
  constexpr size_t kEndLine = sizeof "end 0x0123456789abcdef\n" - 1;
  const size_t endPos =
      text.size() >= header.size() + kEndLine ? text.size() - kEndLine : std::string::npos;
  if (endPos == std::string::npos || text.compare(endPos, 6, "end 0x") != 0 ||
      text.back() != '\n' || (endPos > 0 && text[endPos - 1] != '\n'))
    return corrupt(path, "manifest is truncated (no end line)");
  uint64_t want = 0;
  if (!common::parseHex64(text.substr(endPos + 4, kEndLine - 5), want))
    return corrupt(path, "manifest end line is malformed");
  if (planfile::fnv1a64(reinterpret_cast<const uint8_t *>(text.data()), endPos) != want)
    return corrupt(path, "manifest checksum mismatch");

  out = Manifest{};
  // Unset until read: a manifest of an older runtime lacks the later rows.
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  out.hyper.name = DMUON_UNSET_REAL;
#include "common/HyperParams.def"
  std::set<std::string> seen, shardNames;
  int hyperLines = 0;
  for (size_t at = header.size(); at < endPos;) {
    const size_t eol = text.find('\n', at);
    const std::string line = text.substr(at, eol - at);
    at = eol + 1;
    // Each value checked whole and in range: a manifest is input like any.
    auto bad = [&](const std::string &what) {
      return corrupt(path, "manifest line '" + common::printableName(line) + "': " + what);
    };
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      return bad("expected '<key> <value>'");
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key != "shard" && !seen.insert(key).second)
      return bad("a second '" + common::printableName(key) + "' line");
    // Counters that the runtime increments: far from overflowing.
    constexpr int64_t kMaxCount = int64_t(1) << 53;
    auto count = [&](int64_t max, int64_t &field) {
      char *end = nullptr;
      errno = 0;
      long long v =
          value[0] == '-' || value[0] == '+' || std::isspace(static_cast<unsigned char>(value[0]))
              ? -1
              : std::strtoll(value.c_str(), &end, 10);
      if (v < 0 || errno != 0 || !end || *end != '\0' || v > max)
        return false;
      field = v;
      return true;
    };
    if (key == "step") {
      // Any step a save accepts (dmuon_checkpoint_save refuses negative ones).
      if (!count(INT64_MAX, out.step))
        return bad("step must be an integer >= 0");
    } else if (key == "adamw_step") {
      if (!count(kMaxCount, out.adamwStep))
        return bad("adamw_step must be an integer between 0 and 2^53");
    } else if (key == "nonce") {
      if (!common::parseHex64(value, out.nonce))
        return bad("nonce must be 0x and 16 hex digits");
      out.hasNonce = true;
    } else if (key == "plan_fingerprint") {
      if (!common::parseHex64(value, out.planFingerprint))
        return bad("plan_fingerprint must be 0x and 16 hex digits");
    } else if (key == "model_fingerprint") {
      if (!common::parseHex64(value, out.modelFingerprint))
        return bad("model_fingerprint must be 0x and 16 hex digits");
    } else if (key == "world_size") {
      int64_t world = 0;
      if (!count(common::kMaxWorldSize, world) || world < 1)
        return bad("world_size must be an integer between 1 and " +
                   std::to_string(common::kMaxWorldSize));
      out.worldSize = static_cast<int>(world);
    } else if (key == "steps_applied") {
      if (!count(kMaxCount, out.stepsApplied))
        return bad("steps_applied must be an integer between 0 and 2^53");
    } else if (key == "steps_skipped") {
      if (!count(kMaxCount, out.stepsSkipped))
        return bad("steps_skipped must be an integer between 0 and 2^53");
    } else if (key.rfind("hyper_", 0) == 0) {
      const std::tuple<const char *, double *, const common::HyperRange *> slots[] = {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  {"hyper_" #name, &out.hyper.name, &common::range},
#include "common/HyperParams.def"
      };
      std::pair<double *, const common::HyperRange *> slot{};
      for (const auto &[k, target, range] : slots)
        if (key == k)
          slot = {target, range};
      if (!slot.first)
        return bad("unknown key");
      char *end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (std::isspace(static_cast<unsigned char>(value[0])) || !end || *end != '\0')
        return bad(key + " must be a number");
      if (std::string e = common::hyperRangeError(key.c_str(), v, *slot.second); !e.empty())
        return bad(e);
      *slot.first = v;
      ++hyperLines;
    } else if (key == "shard") {
      if (!validShardName(value))
        return bad("a shard is named shard-<...>.dmck, at most 255 bytes of letters, digits, "
                   "'-', '_' and '.'");
      // One line per rank of the saving run: bounded by world_size below.
      if (!shardNames.insert(value).second)
        return bad("the shard is named twice");
      if (shardNames.size() > static_cast<size_t>(common::kMaxWorldSize))
        return bad("more shards than the largest world size");
      out.shards.push_back(value);
    } else {
      return corrupt(path, "unknown manifest line '" + common::printableName(line) + "'");
    }
  }
  for (const char *key :
       {"step", "adamw_step", "plan_fingerprint", "model_fingerprint", "world_size"})
    if (!seen.count(key))
      return corrupt(path, std::string("manifest has no '") + key + "' line");
  // Written together since the training loop (older manifests have neither).
  if (seen.count("steps_applied") != seen.count("steps_skipped"))
    return corrupt(path, "manifest has one of 'steps_applied' and 'steps_skipped' but not the "
                         "other");
  // Every scheduled row, or (a runtime before SOAP's and Shampoo's were
  // scheduled) exactly Muon's and AdamW's five.
  constexpr int kHyperKeys = 0
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help) +1
#include "common/HyperParams.def"
      ;
  const bool onlyVersion1 =
      hyperLines == 5 && std::isnan(out.hyper.soap_lr) && std::isnan(out.hyper.soap_weight_decay) &&
      std::isnan(out.hyper.shampoo_lr) && std::isnan(out.hyper.shampoo_weight_decay);
  if (hyperLines != 0 && hyperLines != kHyperKeys && !onlyVersion1)
    return corrupt(path, "manifest has " + std::to_string(hyperLines) + " of the " +
                             std::to_string(kHyperKeys) + " hyper_* lines");
  out.hasHyper = hyperLines > 0;
  if (out.shards.size() != static_cast<size_t>(out.worldSize))
    return corrupt(path, "manifest names " + std::to_string(out.shards.size()) +
                             " shards for world_size " + std::to_string(out.worldSize) +
                             " (one per rank)");
  return Status::ok();
}

Status readManifest(const std::string &dir, Manifest &out) {
  const std::string path = manifestPath(dir);
  std::string text;
  if (std::string why =
          common::readRegularFileBounded(path, kMaxManifestBytes, "a checkpoint manifest", text);
      !why.empty())
    return {DMUON_ERROR_IO, "'" + path + "': cannot open checkpoint manifest: " + why};
  return parseManifest(text, path, out);
}

void removeStaleShards(const std::string &dir, const Manifest &m) {
  std::set<std::string> keep(m.shards.begin(), m.shards.end());
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  auto endsWith = [](const std::string &name, const char *suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() > n && name.compare(name.size() - n, n, suffix) == 0;
  };
  // Under the save's lock (DirectoryLock): the temp files here are those of
  // saves that died, never of one in progress.
  while (dirent *ent = ::readdir(d)) {
    std::string name = ent->d_name;
    bool stale =
        name.rfind("shard-", 0) == 0 && (endsWith(name, ".dmck") || endsWith(name, ".tmp"));
    stale |= name.rfind(std::string(kManifestName) + ".", 0) == 0 && endsWith(name, ".tmp");
    if (stale && !keep.count(name))
      ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

} // namespace dmuon::rt::ckpt
