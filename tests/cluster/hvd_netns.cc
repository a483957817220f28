#include "tests/cluster/hvd_netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

namespace hvd::clustertest {
namespace {

using clitest::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kStartTimeout = seconds(15);  // the launcher answers, agents READY
constexpr auto kStopTimeout = seconds(10);   // a daemon's exit after SIGTERM

Status WriteToken(const std::string& path, std::string* written) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char raw[32];
  if (!urandom.read(reinterpret_cast<char*>(raw), sizeof raw)) {
    return Internal("cannot read /dev/urandom for the cluster token");
  }
  std::string token;
  for (unsigned char b : raw) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", b);
    token += hex;
  }
  // Mode 0600 from the start: the launcher and the agents refuse anything looser.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("create " + path + ": " + strerror(errno));
  *written = token;
  token += "\n";
  const bool ok = write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  close(fd);
  return ok ? Status::OK() : Internal("write " + path + ": " + strerror(errno));
}

}  // namespace

bool WaitUntil(const std::function<bool()>& probe, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (probe()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

Status HvdNetnsCluster::Start(const Binaries& bin, const HvdClusterOptions& options,
                              const std::string& dir, std::unique_ptr<HvdNetnsCluster>* out) {
  std::unique_ptr<HvdNetnsCluster> c(new HvdNetnsCluster(bin, options, dir));
  HVD_RETURN_IF_ERROR(c->Begin());  // on error the destructor undoes what was done
  *out = std::move(c);
  return Status::OK();
}

Status HvdNetnsCluster::Begin() {
  HVD_RETURN_IF_ERROR(NetnsCluster::Create(options_.net, &net_));
  token_file_ = dir_ + "/token";
  HVD_RETURN_IF_ERROR(WriteToken(token_file_, &token_));
  agents_.resize(net_->hosts());
  if (!options_.start_launcher) return Status::OK();
  const std::string ip = net_->launcher_addr();
  std::vector<std::string> argv = {bin_.launcherd,
                                   "--listen",
                                   launcher(),
                                   "--rendezvous-listen",
                                   ip + ":7071",
                                   "--http",
                                   ip + ":" + std::to_string(kHttpPort),
                                   "--token-file",
                                   token_file_,
                                   "--kill-grace-ms",
                                   "2000",
                                   "--heartbeat-interval-ms",
                                   "500"};
  argv.insert(argv.end(), options_.launcher_flags.begin(), options_.launcher_flags.end());
  launcher_ = StartIn(net_->launcher_ns(), argv);
  HttpAnswer health;
  const bool up = WaitUntil(
      [&] {
        health = HttpGet("/healthz");
        return health.status == 200 || !clitest::ProcessAlive(launcher_->pid());
      },
      kStartTimeout);
  if (!up || health.status != 200) {
    return Unavailable("hvd-launcherd in " + net_->launcher_ns() + " did not answer on " + ip +
                       ":" + std::to_string(kHttpPort) + " (" + health.error +
                       "); stderr: " + launcher_->Err());
  }
  if (!options_.start_agents) return Status::OK();
  for (int i = 0; i < net_->hosts(); ++i) {
    std::vector<std::string> a = {bin_.agent,
                                  "--launcher",
                                  launcher(),
                                  "--token-file",
                                  token_file_,
                                  "--slots",
                                  std::to_string(options_.slots),
                                  "--host",
                                  net_->host_name(i)};
    if (options_.agent_flags) {
      for (const std::string& f : options_.agent_flags(i)) a.push_back(f);
    }
    agents_[i] = StartIn(net_->host_ns(i), a);
  }
  return WaitAgentsReady(kStartTimeout);
}

HvdNetnsCluster::~HvdNetnsCluster() {
  (void)Stop();
  // Proc's destructor SIGKILLs the process group of anything that did not exit.
  agents_.clear();
  launcher_.reset();
  net_.reset();
}

std::string HvdNetnsCluster::launcher() const {
  return net_->launcher_addr() + ":" + std::to_string(kGrpcPort);
}

std::unique_ptr<clitest::Proc> HvdNetnsCluster::StartIn(const std::string& ns,
                                                        const std::vector<std::string>& argv) {
  auto p = std::make_unique<clitest::Proc>(NetnsCluster::In(ns, argv), dir_, options_.env, dir_);
  pids_.push_back(p->pid());
  return p;
}

std::vector<std::string> HvdNetnsCluster::Hvdrun(const std::string& subcommand,
                                                 const std::vector<std::string>& args) const {
  std::vector<std::string> a = {bin_.hvdrun};
  if (!subcommand.empty()) a.push_back(subcommand);
  for (const std::string& x :
       {std::string("--launcher"), launcher(), std::string("--token-file"), token_file_}) {
    a.push_back(x);
  }
  a.insert(a.end(), args.begin(), args.end());
  return NetnsCluster::In(net_->launcher_ns(), a);
}

clitest::ProcResult HvdNetnsCluster::Run(const std::vector<std::string>& argv_in_ns,
                                         std::chrono::seconds timeout) {
  auto p = std::make_unique<clitest::Proc>(argv_in_ns, dir_, options_.env, dir_);
  pids_.push_back(p->pid());
  return p->Wait(timeout);
}

void HvdNetnsCluster::KillAgent(int i) {
  if (!agents_[i]) return;
  agents_[i]->Signal(SIGKILL);
  (void)agents_[i]->Wait(kStopTimeout);
  agents_[i].reset();
}

Status HvdNetnsCluster::WaitAgentsReady(milliseconds timeout, std::vector<int> hosts) {
  if (hosts.empty()) {
    for (int i = 0; i < net_->hosts(); ++i) hosts.push_back(i);
  }
  std::set<std::string> want, ready;
  for (int i : hosts) want.insert(net_->host_name(i));
  nlohmann::json agents;
  const bool ok = WaitUntil(
      [&] {
        if (!GetJson("/v1/agents", &agents).ok()) return false;
        ready.clear();
        for (const nlohmann::json& a : agents["agents"]) {
          if (a["state"] == "READY") ready.insert(a["host"].get<std::string>());
        }
        for (const std::string& h : want) {
          if (!ready.count(h)) return false;
        }
        return true;
      },
      timeout);
  if (ok) return Status::OK();
  std::string errs;
  for (int i : hosts) {
    if (agents_[i])
      errs.append("\n").append(net_->host_name(i)).append(" agent stderr: ") += agents_[i]->Err();
  }
  return DeadlineExceeded("agents not READY within " + std::to_string(timeout.count()) +
                          " ms; /v1/agents: " + agents.dump() + errs);
}

HttpAnswer HvdNetnsCluster::HttpGet(const std::string& path) {
  int fd = -1;
  Status s = NetnsCluster::SocketIn(net_->launcher_ns(), &fd);
  if (!s.ok()) {
    HttpAnswer a;
    a.error = s.message();
    return a;
  }
  return testing::HttpGet(fd, net_->launcher_addr(), kHttpPort, path, token_);
}

Status HvdNetnsCluster::GetJson(const std::string& path, nlohmann::json* out) {
  HttpAnswer a = HttpGet(path);
  if (!a.error.empty() || a.status != 200) {
    return Unavailable("GET " + path + ": " + std::to_string(a.status) + " " + a.error + a.body);
  }
  *out = nlohmann::json::parse(a.body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Internal("GET " + path + ": not JSON: " + a.body);
  return Status::OK();
}

Status HvdNetnsCluster::Stop() {
  Status first;
  auto stop = [&](std::unique_ptr<clitest::Proc>& p, const std::string& name) {
    if (!p) return;
    p->Signal(SIGTERM);
    clitest::ProcResult r = p->Wait(kStopTimeout);  // SIGKILLs its group on timeout
    if ((r.timed_out || r.exit_code != 0) && first.ok()) {
      first = Internal(
          name +
          (r.timed_out ? " ignored SIGTERM" : " exited with code " + std::to_string(r.exit_code)) +
          "; stderr: " + r.err);
    }
    p.reset();
  };
  // The agents first (each stops its workers), then the launcher.
  for (size_t i = 0; i < agents_.size(); ++i) {
    stop(agents_[i], "hvd-agent on " + net_->host_name(static_cast<int>(i)));
  }
  stop(launcher_, "hvd-launcherd");
  return first;
}

std::vector<pid_t> HvdNetnsCluster::LivePids() const {
  std::vector<pid_t> live;
  for (pid_t p : pids_) {
    if (clitest::ProcessAlive(p)) live.push_back(p);
  }
  return live;
}

}  // namespace hvd::clustertest
