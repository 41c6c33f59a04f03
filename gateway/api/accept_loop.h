// One thread per connection, as the REST API and fedctl console serve:
// accepts until `stop`, and past `max_active` open connections new ones wait
// in the kernel's accept queue instead of being dropped (a burst of clients
// is slowed, not failed).
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <thread>
#include <utility>

namespace fedgate::gateway {

template <typename Serve>
void AcceptEach(boost::asio::io_context& io, boost::asio::ip::tcp::acceptor& acceptor,
                const std::atomic<bool>& stop, std::atomic<int>& active, int max_active,
                Serve serve) {
  using tcp = boost::asio::ip::tcp;
  while (!stop) {
    boost::system::error_code ec;
    tcp::socket sock(io);
    acceptor.accept(sock, ec);
    if (ec) {
      if (stop) return;
      continue;
    }
    while (active.load() >= max_active && !stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ++active;
    std::thread([&active, serve, s = std::move(sock)]() mutable {
      serve(std::move(s));
      --active;
    }).detach();
  }
}

}  // namespace fedgate::gateway
