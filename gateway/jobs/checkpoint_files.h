// A job's checkpoints on disk: `step-<N>` files or folders that ranks rename
// into FEDGATE_CHECKPOINT_DIR (so one is complete when it appears). Names
// are read, never trusted: other names are the trainer's own and are left
// alone; the gateway's own temporary names start with ".fedgate-".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"

namespace fedgate::gateway {

// N of "step-<N>" (digits only, no sign, no leading '+', at most 19 digits);
// nullopt for any other name.
std::optional<uint64_t> ParseStepName(const std::string& name);
std::string StepName(uint64_t step);

// The complete checkpoints in `dir`, ascending. Names that start with
// "step-" but are not a number go to `malformed` (when given).
std::vector<uint64_t> ListCheckpointSteps(const std::string& dir,
                                          std::vector<std::string>* malformed = nullptr);

// Every regular file of a checkpoint (the step itself when it is a file:
// one entry with path ""), in a stable order, with size and SHA-256.
absl::StatusOr<std::vector<v1::CheckpointFile>> CheckpointManifest(const std::string& step_path);

// SHA-256 of a file, hex.
absl::StatusOr<std::string> Sha256File(const std::string& path);

// SHA-256 fed piece by piece (a copy hashes what it streams).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  // Adds the first `n` bytes of a file; false when it has fewer.
  bool UpdateFromFile(const std::string& path, uint64_t n);
  std::string Hex();  // ends the hash

 private:
  void* ctx_;
};

// The regular files of a checkpoint (the step itself when it is a file:
// one entry with path ""), in a stable order, with their sizes; no digests.
absl::StatusOr<std::vector<v1::CheckpointFile>> CheckpointFiles(const std::string& step_path);

// A path inside a checkpoint that names no parent, root or hidden trick:
// relative, no "." or ".." parts, no empty parts, at most 1024 bytes.
bool SafeRelativePath(const std::string& path);

// Removes all but the newest `keep` steps; returns what it removed. Each is
// first moved into `trash` (the gateway's own folder on the same file
// system), so that a rank swapping a folder for a link cannot steer the
// removal elsewhere.
std::vector<uint64_t> PruneCheckpoints(const std::string& dir, uint32_t keep,
                                       const std::string& trash);

// Moves `from` (in the gateway's staging) to `dir`/`name` without following
// a link in place of `dir`; EEXIST-like failures leave `from` where it is.
absl::Status PublishInto(const std::string& from, const std::string& dir, const std::string& name);

// Opens a checkpoint file for reading without following a link at its last
// component; with `owner` set, refuses a file another user owns (a rank
// cannot have the gateway read what the rank could not).
absl::StatusOr<int> OpenCheckpointFile(const std::string& path, const uid_t* owner);

// A gateway-owned folder (0700), made when missing.
absl::Status MakePrivateDir(const std::string& path);

// Hands a file tree to the ranks' user (chown -R), where the gateway
// switches users.
void ChownTree(const std::string& path, uid_t uid, gid_t gid);

}  // namespace fedgate::gateway
