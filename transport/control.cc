#include "transport/control.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <boost/asio/write.hpp>

#include "base/str_cat.h"

namespace fedgate::transport {

std::string EncodeFrame(std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out(4, '\0');
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  out.append(payload);
  return out;
}

uint32_t DecodeFrameLength(const unsigned char header[4]) {
  return (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) | (uint32_t{header[2]} << 8) |
         uint32_t{header[3]};
}

absl::StatusOr<uint32_t> CheckFrameHeader(const unsigned char header[4]) {
  const uint32_t n = DecodeFrameLength(header);
  if (n > kMaxControlFrameBytes) {
    return absl::InvalidArgumentError(
        StrCat("control connection: frame of ", n, " bytes exceeds the limit (not fedbench?)"));
  }
  return n;
}

absl::Status ParseFramePayload(std::string_view payload, google::protobuf::MessageLite* msg) {
  if (!msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError("control connection: malformed message");
  }
  return absl::OkStatus();
}

void SetSocketTimeouts(boost::asio::ip::tcp::socket& s, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status ControlChannel::Send(const google::protobuf::MessageLite& msg) {
  const std::string frame = EncodeFrame(msg.SerializeAsString());
  boost::system::error_code ec;
  boost::asio::write(socket_, boost::asio::buffer(frame), ec);
  if (ec) return absl::UnavailableError(StrCat("control connection: send failed: ", ec.message()));
  return absl::OkStatus();
}

namespace {

// Reads exactly `len` bytes before `deadline`. Asio's blocking read ignores
// SO_RCVTIMEO (it polls again without a limit), so a client that connects
// and stays silent would hold the reader forever; this one polls itself.
boost::system::error_code ReadFull(boost::asio::ip::tcp::socket& s, char* buf, size_t len,
                                   std::chrono::steady_clock::time_point deadline) {
  size_t got = 0;
  while (got < len) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return boost::asio::error::timed_out;
    pollfd pfd{s.native_handle(), POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return {errno, boost::system::system_category()};
    if (r == 0) return boost::asio::error::timed_out;
    const ssize_t n = ::recv(s.native_handle(), buf + got, len - got, MSG_DONTWAIT);
    if (n == 0) return boost::asio::error::eof;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return {errno, boost::system::system_category()};
    }
    got += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

absl::Status ControlChannel::Recv(google::protobuf::MessageLite* msg, int timeout_ms) {
  SetSocketTimeouts(socket_, timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  unsigned char header[4];
  auto ec = ReadFull(socket_, reinterpret_cast<char*>(header), 4, deadline);
  if (ec == boost::asio::error::eof) {
    return absl::UnavailableError("control connection closed by the other side");
  }
  if (ec == boost::asio::error::timed_out) {
    return absl::DeadlineExceededError(
        StrCat("control connection: no answer within ", timeout_ms, " ms"));
  }
  if (ec) return absl::UnavailableError(StrCat("control connection: ", ec.message()));
  auto n = CheckFrameHeader(header);
  if (!n.ok()) return n.status();
  std::string payload(*n, '\0');
  ec = ReadFull(socket_, payload.data(), payload.size(), deadline);
  if (ec == boost::asio::error::timed_out) {
    return absl::DeadlineExceededError(
        StrCat("control connection: message not complete within ", timeout_ms, " ms"));
  }
  if (ec) return absl::UnavailableError(StrCat("control connection: ", ec.message()));
  return ParseFramePayload(payload, msg);
}

}  // namespace fedgate::transport
