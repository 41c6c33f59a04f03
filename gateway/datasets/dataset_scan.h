// Verifies a dataset's folder and makes its manifest: every file's size and
// SHA-256, refusing what a rank could use to read outside the folder
// (a symlink leaving it) or what is no plain file (a device, a socket).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"

namespace fedgate::gateway {

struct ScanProgress {
  uint64_t bytes_hashed = 0;  // read and hashed in this scan
  uint64_t bytes_total = 0;   // of every file
  uint64_t bytes_reused = 0;  // digests taken from `previous` (unchanged files)
};

// Walks `root` (a folder) and returns its manifest, files sorted by path and
// the digest set. A file whose path, size and modification time equal an
// entry of `previous` keeps that entry's SHA-256 without being read again.
// FAILED_PRECONDITION naming the path for a symlink out of the folder, a
// symlinked folder, or a file that is not a regular file; NOT_FOUND when
// `root` is no folder. `progress` runs now and then; `stop` cancels
// (CANCELLED).
absl::StatusOr<v1::DatasetManifest> ScanDataset(
    const std::string& root, const v1::DatasetManifest& previous,
    const std::function<void(const ScanProgress&)>& progress, const std::atomic<bool>* stop);

// SHA-256 (hex) over the manifest's (path, size, sha256) in path order.
std::string ManifestDigest(const v1::DatasetManifest& m);

// SHA-256 (hex) of a file's content; `stop` cancels.
absl::StatusOr<std::string> FileSha256(const std::string& path, const std::atomic<bool>* stop,
                                       const std::function<void(uint64_t)>& read_bytes = {});

// A manifest path a peer sent is safe to join to a folder: relative, no "..",
// ".", empty or backslash component, no NUL.
bool IsSafeRelativePath(const std::string& path);

}  // namespace fedgate::gateway
