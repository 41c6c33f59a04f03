// The peer calls that move datasets: a holder's manifest and files (to a
// site staging them), and a coordinator's Stage ask to a site chosen without
// them. Only files of a verified dataset's manifest are ever read.
#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "base/str_cat.h"
#include "gateway/api/rpc_guard.h"
#include "gateway/api/services.h"
#include "gateway/datasets/dataset_registry.h"
#include "gateway/datasets/dataset_scan.h"
#include "gateway/jobs/participant.h"
#include "gateway/ops/metrics.h"
#include "gateway/security/authz.h"

namespace fedgate::gateway {
namespace {

constexpr size_t kChunk = 1 << 20;

absl::Status CallerIs(const std::string& named, const Identity& id) {
  if (named == id.site) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("request names site \"", named,
                                           "\" but the certificate is of \"", id.site, "\""));
}

// One file of a held dataset from an offset, 1 MiB per message.
class DatasetWriter final : public grpc::ServerWriteReactor<v1::DatasetChunk> {
 public:
  DatasetWriter(int fd, uint64_t left, absl::Status refused) : fd_(fd), left_(left) {
    if (!refused.ok()) {
      Finish(ToGrpc(refused));
      return;
    }
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {  // the reader went away
      Finish(grpc::Status::CANCELLED);
      return;
    }
    Next();
  }
  void OnDone() override {
    if (fd_ >= 0) ::close(fd_);
    delete this;
  }

 private:
  void Next() {
    if (left_ == 0) {
      Finish(grpc::Status::OK);
      return;
    }
    buf_.resize(std::min<uint64_t>(kChunk, left_));
    const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
    if (n <= 0) {
      Finish(grpc::Status(grpc::StatusCode::DATA_LOSS, "the file is shorter than its manifest"));
      return;
    }
    left_ -= static_cast<uint64_t>(n);
    chunk_.set_data(buf_.data(), static_cast<size_t>(n));
    StartWrite(&chunk_);
  }
  int fd_;
  uint64_t left_;
  std::string buf_;
  v1::DatasetChunk chunk_;
};

}  // namespace

grpc::ServerUnaryReactor* PeerServiceImpl::GetDatasetManifest(
    grpc::CallbackServerContext* ctx, const v1::DatasetManifestRequest* req,
    v1::DatasetManifest* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kReservation, "GetDatasetManifest",
                 [&](const Identity& id) -> absl::Status {
                   if (auto st = CallerIs(req->site(), id); !st.ok()) return st;
                   auto held = datasets_ == nullptr ? std::nullopt : datasets_->Find(req->name());
                   if (!held) {
                     return absl::NotFoundError(StrCat("no dataset \"", req->name().substr(0, 100),
                                                       "\" is held here"));
                   }
                   *resp = held->manifest;
                   return absl::OkStatus();
                 });
}

grpc::ServerWriteReactor<v1::DatasetChunk>* PeerServiceImpl::FetchDataset(
    grpc::CallbackServerContext* ctx, const v1::FetchDatasetRequest* req) {
  int fd = -1;
  uint64_t left = 0;
  absl::Status st = RunGuarded(
      *ctx->auth_context(), authz_, metrics_, RpcClass::kReservation, "FetchDataset",
      [&](const Identity& id) -> absl::Status {
        if (auto s = CallerIs(req->site(), id); !s.ok()) return s;
        auto held = datasets_ == nullptr ? std::nullopt : datasets_->Find(req->name());
        if (!held) {
          return absl::NotFoundError(StrCat("no dataset \"", req->name().substr(0, 100), "\" is held here"));
        }
        if (held->manifest.digest() != req->digest()) {
          return absl::FailedPreconditionError(
              StrCat("dataset ", req->name(), " here has digest ", held->manifest.digest().substr(0, 16),
                     ", not ", req->digest().substr(0, 16)));
        }
        // Only a path of the verified manifest: nothing else is ever opened.
        const v1::DatasetFile* file = nullptr;
        for (const auto& f : held->manifest.files()) {
          if (f.path() == req->path()) file = &f;
        }
        if (file == nullptr || !IsSafeRelativePath(req->path())) {
          metrics_->Inc("fedgate_dataset_refused_total", {{"reason", "bad_path"}});
          return absl::NotFoundError(StrCat("\"", req->path().substr(0, 100), "\" is not a file of dataset ",
                                            req->name()));
        }
        if (req->offset() > file->size_bytes()) {
          return absl::OutOfRangeError(StrCat("offset ", req->offset(), " is past the end of ", req->path()));
        }
        fd = ::open(StrCat(held->path, "/", req->path()).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::lseek(fd, static_cast<off_t>(req->offset()), SEEK_SET) < 0) {
          return absl::UnavailableError(StrCat("cannot read ", req->path(), " of ", req->name()));
        }
        left = file->size_bytes() - req->offset();
        return absl::OkStatus();
      });
  if (!st.ok() && fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  return new DatasetWriter(fd, left, st);
}

grpc::ServerUnaryReactor* PeerServiceImpl::Stage(grpc::CallbackServerContext* ctx,
                                                 const v1::StageRequest* req,
                                                 v1::StageResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kReservation, "Stage",
                 [&](const Identity& id) -> absl::Status {
                   if (auto st = CallerIs(req->site(), id); !st.ok()) return st;
                   auto out = participant_->Stage(id.site, *req);
                   if (out.ok()) *resp = std::move(*out);
                   return out.status();
                 });
}

}  // namespace fedgate::gateway
