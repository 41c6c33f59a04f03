// Shuts sockets down at their deadlines, from one thread: the REST server's
// connections (slowloris) and the service proxy's connections to replicas.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace fedgate::gateway {

// Closes (shuts down) connections past their deadline, so that a client that
// sends its handshake, headers or body slowly, or not at all, lets go of its
// thread: Asio's blocking reads do not honour SO_RCVTIMEO.
class Deadlines {
 public:
  Deadlines() : thread_([this] { Run(); }) {}
  ~Deadlines() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Arm(int fd, std::chrono::milliseconds in) {
    std::lock_guard lock(mu_);
    due_[fd] = std::chrono::steady_clock::now() + in;
  }
  void Disarm(int fd) {
    std::lock_guard lock(mu_);
    due_.erase(fd);
  }
  // Shutting down: every connection's time is up now.
  void ExpireAll() {
    std::lock_guard lock(mu_);
    for (auto& [fd, due] : due_) due = std::chrono::steady_clock::time_point::min();
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const auto now = std::chrono::steady_clock::now();
      for (auto it = due_.begin(); it != due_.end();) {
        if (it->second <= now) {
          ::shutdown(it->first, SHUT_RDWR);  // the blocked read returns
          it = due_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<int, std::chrono::steady_clock::time_point> due_;
  std::thread thread_;
};

}  // namespace fedgate::gateway
