#include "gateway/datasets/dataset_scan.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "base/str_cat.h"

namespace fedgate::gateway {
namespace fs = std::filesystem;
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  return out;
}

struct MdCtx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~MdCtx() { EVP_MD_CTX_free(ctx); }
};

bool Inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin();
  for (auto it = p.begin(); r != root.end(); ++it, ++r) {
    if (it == p.end() || *it != *r) return false;
  }
  return true;
}

int64_t MtimeNs(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  return ec ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

bool IsSafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

absl::StatusOr<std::string> FileSha256(const std::string& path, const std::atomic<bool>* stop,
                                       const std::function<void(uint64_t)>& read_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  MdCtx md;
  EVP_DigestInit_ex(md.ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    if (stop != nullptr && stop->load()) return absl::CancelledError("stopped");
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    EVP_DigestUpdate(md.ctx, buf.data(), n);
    if (read_bytes) read_bytes(n);
  }
  if (in.bad()) return absl::DataLossError(StrCat("read error in ", path));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md.ctx, out, &len);
  return Hex(out, len);
}

std::string ManifestDigest(const v1::DatasetManifest& m) {
  MdCtx md;
  EVP_DigestInit_ex(md.ctx, EVP_sha256(), nullptr);
  for (const auto& f : m.files()) {
    const std::string line = StrCat(f.path(), std::string(1, '\0'), f.size_bytes(), " ", f.sha256(), "\n");
    EVP_DigestUpdate(md.ctx, line.data(), line.size());
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md.ctx, out, &len);
  return Hex(out, len);
}

absl::StatusOr<v1::DatasetManifest> ScanDataset(
    const std::string& root_text, const v1::DatasetManifest& previous,
    const std::function<void(const ScanProgress&)>& progress, const std::atomic<bool>* stop) {
  std::error_code ec;
  const fs::path root = fs::canonical(root_text, ec);
  if (ec || !fs::is_directory(root, ec)) {
    return absl::NotFoundError(StrCat(root_text, " is not a readable folder"));
  }
  struct Found {
    std::string rel;
    fs::path real;  // the file read (a symlink's target inside the folder)
    uint64_t size;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  ScanProgress p;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) return absl::NotFoundError(StrCat("cannot list ", root_text, ": ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return absl::DataLossError(StrCat("cannot list ", root_text, ": ", ec.message()));
    const fs::path& path = it->path();
    const std::string rel = path.lexically_relative(root).generic_string();
    fs::path real = path;
    if (it->is_symlink(ec)) {
      real = fs::canonical(path, ec);
      if (ec || !Inside(real, root)) {
        return absl::FailedPreconditionError(
            StrCat(rel, " is a symlink out of the dataset folder ", root_text));
      }
      if (fs::is_directory(real, ec)) {
        return absl::FailedPreconditionError(
            StrCat(rel, " is a symlinked folder (not supported in datasets)"));
      }
    } else if (it->is_directory(ec)) {
      continue;
    }
    if (!fs::is_regular_file(real, ec)) {
      return absl::FailedPreconditionError(StrCat(rel, " is not a regular file"));
    }
    if (!IsSafeRelativePath(rel)) {
      return absl::FailedPreconditionError(StrCat("\"", rel, "\" is not a path a dataset may hold"));
    }
    const uint64_t size = fs::file_size(real, ec);
    found.push_back({rel, real, size, MtimeNs(real)});
    p.bytes_total += size;
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.rel < b.rel; });
  std::map<std::string, const v1::DatasetFile*> before;
  for (const auto& f : previous.files()) before[f.path()] = &f;
  v1::DatasetManifest out;
  out.set_name(previous.name());
  out.set_version(previous.version());
  auto last_report = std::chrono::steady_clock::now();
  for (const auto& f : found) {
    auto* e = out.add_files();
    e->set_path(f.rel);
    e->set_size_bytes(f.size);
    e->set_mtime_ns(f.mtime_ns);
    auto old = before.find(f.rel);
    if (old != before.end() && old->second->size_bytes() == f.size &&
        old->second->mtime_ns() == f.mtime_ns && !old->second->sha256().empty()) {
      e->set_sha256(old->second->sha256());
      p.bytes_reused += f.size;
      continue;
    }
    auto sum = FileSha256(f.real.string(), stop, [&](uint64_t n) {
      p.bytes_hashed += n;
      if (progress && std::chrono::steady_clock::now() - last_report > std::chrono::seconds(5)) {
        last_report = std::chrono::steady_clock::now();
        progress(p);
      }
    });
    if (!sum.ok()) return sum.status();
    e->set_sha256(*sum);
  }
  out.set_digest(ManifestDigest(out));
  if (progress) progress(p);
  return out;
}

}  // namespace fedgate::gateway
