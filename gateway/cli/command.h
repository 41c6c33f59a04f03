// What fedctl's nouns share: the global flags, the connection to a gateway,
// error exits, output, and the shape of one command (a CLI11 subcommand and
// what runs when it was parsed).
#pragma once

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gateway/cli/output.h"

namespace fedgate::cli {

struct Globals {
  std::string gateway;
  std::string tls_dir;
  std::string site;  // pinned: only this site's gateway is accepted as the server
  std::string output = "table";
  bool follow = true;  // job commands go on to the job's coordinator
  Format format() const;
};

// One leaf command: runs when `sub` was parsed; returns the exit code.
struct Command {
  CLI::App* sub = nullptr;
  std::function<int(const Globals&)> run;
};
using Commands = std::vector<Command>;

// Each noun adds its subcommands to `app`; the options they bind live in the
// commands' closures.
void AddCertsCommands(CLI::App& app, Commands* out);
void AddPeersCommands(CLI::App& app, Commands* out);
void AddNodesCommands(CLI::App& app, Commands* out);
void AddQuotaCommands(CLI::App& app, Commands* out);  // quota list, get, set
void AddUsageCommands(CLI::App& app, Commands* out);  // usage
void AddLinksCommands(CLI::App& app, Commands* out);  // links, links probe, capacity
void AddJobsCommands(CLI::App& app, Commands* out);   // jobs ..., vc get
void AddServicesCommands(CLI::App& app, Commands* out);  // services ...
void AddConsoleCommands(CLI::App& app, Commands* out);  // console

[[noreturn]] void Die(const std::string& msg, int code = 1);
// --tls-dir, else $FEDCTL_TLS_DIR; dies when neither is set.
std::string TlsDir(const Globals& g);
// --gateway, else $FEDCTL_GATEWAY, else 127.0.0.1:7443.
std::string GatewayEndpoint(const Globals& g);
// An mTLS channel to --gateway with the identity in --tls-dir; dies with a
// clear message when either is missing or unreadable.
std::shared_ptr<grpc::Channel> Connect(const Globals& g);
// Dies naming the command and the status when `st` is not OK.
void CheckRpc(const grpc::Status& st, const Globals& g, const char* what);
// 10 seconds from now.
void SetDeadline(grpc::ClientContext* ctx);
void Print(const google::protobuf::Message& msg, Format f, const std::string& table);

}  // namespace fedgate::cli
