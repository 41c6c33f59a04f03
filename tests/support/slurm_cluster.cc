#include "tests/support/slurm_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "tests/support/harness.h"
#include "tests/support/temp_dir.h"

namespace fedgate::testing {
namespace {

std::string Hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

pid_t ReadPid(const std::string& file) {
  std::ifstream f(file);
  long pid = 0;
  return (f >> pid) ? static_cast<pid_t>(pid) : 0;
}

}  // namespace

SlurmTestCluster::SlurmTestCluster(std::vector<std::string> nodes, int gpus,
                                   std::string gres_type)
    : nodes_(std::move(nodes)) {
  // Outside any private temp dir: ranks (another user) run srun, which
  // reads slurm.conf and talks to munged through its socket here.
  std::random_device rd;
  dir_ = "/var/tmp/fedgate-test-slurm-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
  namespace fs = std::filesystem;
  fs::create_directories(dir_ + "/dev");
  for (const char* d : {"state", "spool", "log", "munge"}) fs::create_directories(dir_ + "/" + d);
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  for (int i = 0; i < gpus; ++i) {
    ::mknod((dir_ + "/dev/nvidia" + std::to_string(i)).c_str(), S_IFCHR | 0666, makedev(1, 3));
  }
  {
    std::ofstream key(dir_ + "/munge/munge.key", std::ios::binary);
    for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rd() & 0xff));
  }
  ::chmod((dir_ + "/munge/munge.key").c_str(), 0400);
  const std::string host = Hostname();
  std::ostringstream c;
  c << "ClusterName=fedtest\nSlurmctldHost=" << host << "\nSlurmctldPort=" << FreePort()
    << "\nSlurmdPort=" << FreePort() << "\nAuthType=auth/munge\nAuthInfo=socket=" << dir_
    << "/munge/munge.sock\nCredType=cred/munge\nMpiDefault=none\n"
    << "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nReturnToService=2\n"
    << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
    << "SlurmdSpoolDir=" << dir_ << "/spool/%n\nStateSaveLocation=" << dir_ << "/state\n"
    << "SlurmUser=root\nSlurmdUser=root\nSchedulerType=sched/backfill\n"
    << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nGresTypes=gpu\n"
    << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\nSlurmdLogFile=" << dir_
    << "/log/slurmd-%n.log\nJobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
    << "JobAcctGatherType=jobacct_gather/none\nSlurmdParameters=config_overrides\n"
    << "SlurmctldTimeout=30\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=2\n";
  std::ostringstream g;
  std::string list;
  for (const auto& n : nodes_) {
    c << "NodeName=" << n << " NodeHostname=" << host << " NodeAddr=127.0.0.1 Port=" << FreePort()
      << " CPUs=16 Gres=gpu:" << gres_type << ":" << gpus << " State=UNKNOWN\n";
    g << "NodeName=" << n << " Name=gpu Type=" << gres_type << " File=" << dir_ << "/dev/nvidia[0-"
      << gpus - 1 << "]\n";
    list += (list.empty() ? "" : ",") + n;
  }
  c << "PartitionName=gpu Nodes=" << list << " Default=YES MaxTime=INFINITE State=UP\n";
  conf_ = dir_ + "/slurm.conf";
  WriteText(conf_, c.str());
  WriteText(dir_ + "/gres.conf", g.str());
  ::chmod(conf_.c_str(), 0644);
  ::chmod((dir_ + "/gres.conf").c_str(), 0644);
  // Daemons detach themselves; each is found again by its pid file.
  auto start = [&](std::vector<std::string> argv) {
    auto r = Run(argv, 20000);
    if (r.exit_code != 0) error_ += argv[0] + " failed: " + r.err + "\n";
  };
  start({"/usr/sbin/munged", "--socket=" + dir_ + "/munge/munge.sock", "--key-file=" + dir_ + "/munge/munge.key",
         "--pid-file=" + dir_ + "/munge/munged.pid", "--log-file=" + dir_ + "/log/munged.log",
         "--seed-file=" + dir_ + "/munge/munge.seed", "--force"});
  pid_files_.push_back(dir_ + "/munge/munged.pid");
  start({"/usr/sbin/slurmctld", "-f", conf_});
  pid_files_.push_back(dir_ + "/slurmctld.pid");
  for (const auto& n : nodes_) {
    start({"/usr/sbin/slurmd", "-f", conf_, "-N", n});
    pid_files_.push_back(dir_ + "/slurmd-" + n + ".pid");
  }
}

SlurmTestCluster::~SlurmTestCluster() {
  (void)Run({"scancel", "--user=root"}, 5000);
  // slurmd and slurmctld first, munged last; SIGKILL whatever lingers.
  for (auto it = pid_files_.rbegin(); it != pid_files_.rend(); ++it) {
    if (pid_t pid = ReadPid(*it); pid > 0) ::kill(pid, SIGTERM);
  }
  for (int i = 0; i < 30; ++i) {
    bool any = false;
    for (const auto& f : pid_files_) {
      pid_t pid = ReadPid(f);
      any = any || (pid > 0 && ::kill(pid, 0) == 0);
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const auto& f : pid_files_) {
    if (pid_t pid = ReadPid(f); pid > 0 && ::kill(pid, 0) == 0) ::kill(pid, SIGKILL);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

CommandResult SlurmTestCluster::Run(std::vector<std::string> argv, int timeout_ms) const {
  // The test helper spawns by path: Slurm's clients live in /usr/bin.
  if (!argv.empty() && argv[0].find('/') == std::string::npos) argv[0] = "/usr/bin/" + argv[0];
  try {
    return RunCommand(argv, {"SLURM_CONF=" + conf_}, timeout_ms);
  } catch (const std::exception& e) {
    CommandResult r;
    r.err = e.what();
    return r;
  }
}

bool SlurmTestCluster::Ready(int timeout_ms) {
  const bool up = Eventually(
      [&] {
        auto r = Run({"sinfo", "-h", "-N", "-o", "%N %T"}, 5000);
        if (r.exit_code != 0) return false;
        size_t idle = 0;
        std::istringstream in(r.out);
        std::string node, state;
        while (in >> node >> state) idle += state == "idle" ? 1 : 0;
        return idle == nodes_.size();
      },
      timeout_ms, 200);
  if (!up) {
    error_ += "slurmctld log:\n" + ReadText(dir_ + "/log/slurmctld.log");
    auto r = Run({"sinfo", "-N", "-o", "%N %T %E"}, 5000);
    error_ += "sinfo: " + r.out + r.err;
  }
  return up;
}

void SlurmTestCluster::StopController() {
  const pid_t pid = ReadPid(dir_ + "/slurmctld.pid");
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void SlurmTestCluster::StartController() {
  auto r = Run({"/usr/sbin/slurmctld", "-f", conf_}, 20000);
  if (r.exit_code != 0) error_ += "slurmctld failed: " + r.err + "\n";
}

std::vector<std::string> SlurmTestCluster::Queue() const {
  auto r = Run({"squeue", "-h", "-o", "%i"}, 5000);
  std::vector<std::string> ids;
  std::istringstream in(r.out);
  std::string id;
  while (in >> id) ids.push_back(id);
  return ids;
}

}  // namespace fedgate::testing
