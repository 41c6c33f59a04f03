#include "gateway/jobs/checkpoint_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/str_cat.h"

namespace fedgate::gateway {

namespace fs = std::filesystem;

std::optional<uint64_t> ParseStepName(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(kPrefix.size());
  if (digits.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

std::string StepName(uint64_t step) { return StrCat("step-", step); }

std::vector<uint64_t> ListCheckpointSteps(const std::string& dir,
                                          std::vector<std::string>* malformed) {
  std::vector<uint64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto n = ParseStepName(name)) {
      steps.push_back(*n);
    } else if (malformed != nullptr && name.rfind("step-", 0) == 0) {
      malformed->push_back(name);
    }
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

bool Sha256::UpdateFromFile(const std::string& path, uint64_t n) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (n > 0 && in) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(buf.size(), n)));
    const auto got = static_cast<uint64_t>(in.gcount());
    if (got == 0) break;
    Update(buf.data(), got);
    n -= got;
  }
  return n == 0;
}

std::string Sha256::Hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(StrCat("cannot read ", path));
  Sha256 h;
  if (!h.UpdateFromFile(path, size)) return absl::DataLossError(StrCat("read error in ", path));
  return h.Hex();
}

absl::StatusOr<std::vector<v1::CheckpointFile>> CheckpointFiles(const std::string& step_path) {
  std::error_code ec;
  const auto st = fs::symlink_status(step_path, ec);
  if (ec || !fs::exists(st)) return absl::NotFoundError(StrCat(step_path, " is gone"));
  std::vector<std::pair<std::string, std::string>> files;  // relative, absolute
  if (fs::is_regular_file(st)) {
    files.emplace_back("", step_path);
  } else if (fs::is_directory(st)) {
    for (fs::recursive_directory_iterator it(step_path, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_symlink() || !it->is_regular_file()) continue;  // links are not followed
      files.emplace_back(fs::relative(it->path(), step_path).string(), it->path().string());
    }
    if (ec) return absl::NotFoundError(StrCat("cannot list ", step_path, ": ", ec.message()));
    std::sort(files.begin(), files.end());
  } else {
    return absl::InvalidArgumentError(StrCat(step_path, " is neither a file nor a folder"));
  }
  std::vector<v1::CheckpointFile> out;
  for (const auto& [rel, abs] : files) {
    v1::CheckpointFile f;
    f.set_path(rel);
    const auto size = fs::file_size(abs, ec);
    if (ec) return absl::NotFoundError(StrCat(abs, " is gone"));
    f.set_size_bytes(size);
    out.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<std::vector<v1::CheckpointFile>> CheckpointManifest(const std::string& step_path) {
  auto files = CheckpointFiles(step_path);
  if (!files.ok()) return files.status();
  for (auto& f : *files) {
    auto sha = Sha256File(f.path().empty() ? step_path : StrCat(step_path, "/", f.path()));
    if (!sha.ok()) return sha.status();
    f.set_sha256(*sha);
  }
  return files;
}

bool SafeRelativePath(const std::string& path) {
  if (path.empty()) return true;  // the checkpoint is the file itself
  if (path.size() > 1024 || path.front() == '/' || path.find('\0') != std::string::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::vector<uint64_t> PruneCheckpoints(const std::string& dir, uint32_t keep,
                                       const std::string& trash) {
  auto steps = ListCheckpointSteps(dir);
  std::vector<uint64_t> removed;
  if (keep == 0 || steps.size() <= keep || !MakePrivateDir(trash).ok()) return removed;
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return removed;
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    const std::string gone = StrCat(trash, "/pruned-", ::getpid(), "-", steps[i]);
    std::error_code ec;
    fs::remove_all(gone, ec);
    if (::renameat(dfd, StepName(steps[i]).c_str(), AT_FDCWD, gone.c_str()) != 0) continue;
    fs::remove_all(gone, ec);
    removed.push_back(steps[i]);
  }
  ::close(dfd);
  return removed;
}

absl::Status PublishInto(const std::string& from, const std::string& dir, const std::string& name) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return absl::InternalError(StrCat("cannot open ", dir, ": ", std::strerror(errno)));
  const int rc = ::renameat(AT_FDCWD, from.c_str(), dfd, name.c_str());
  const int err = errno;
  ::close(dfd);
  if (rc != 0) {
    return absl::InternalError(StrCat("cannot publish ", dir, "/", name, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> OpenCheckpointFile(const std::string& path, const uid_t* owner) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat(path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (owner != nullptr && st.st_uid != *owner)) {
    ::close(fd);
    return absl::PermissionDeniedError(
        StrCat(path, " is not a regular file of the ranks' user: not copied"));
  }
  return fd;
}

absl::Status MakePrivateDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::InternalError(StrCat(path, " is not a folder of the gateway's own"));
  }
  ::chmod(path.c_str(), 0700);
  return absl::OkStatus();
}

void ChownTree(const std::string& path, uid_t uid, gid_t gid) {
  (void)::lchown(path.c_str(), uid, gid);
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec))) return;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    (void)::lchown(it->path().c_str(), uid, gid);
  }
}

}  // namespace fedgate::gateway
