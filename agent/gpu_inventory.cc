#include "agent/gpu_inventory.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/host_info.h"

extern char** environ;

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;

// The few NVML entry points used, with NVML's C types (nvml.h is not needed to build).
using NvmlReturn = int;  // NVML_SUCCESS == 0
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
using InitFn = NvmlReturn (*)();
using CountFn = NvmlReturn (*)(unsigned int*);
using HandleFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using StringFn = NvmlReturn (*)(NvmlDevice, char*, unsigned int);
using MemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using ErrorFn = const char* (*)(NvmlReturn);

std::string Trim(std::string s) {
  const size_t b = s.find_first_not_of(" \t\r");
  const size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string GpuInventory::Describe() const {
  if (gpus.empty()) return "no GPU (" + (notes.empty() ? std::string("no source") : notes) + ")";
  std::string out = std::to_string(gpus.size()) + " GPU(s) from " + source;
  for (size_t i = 0; i < gpus.size(); ++i) {
    out +=
        (i == 0 ? ": " : ", ") + (gpus[i].name.empty() ? "GPU " + std::to_string(i) : gpus[i].name);
    if (gpus[i].memory_bytes > 0) {
      out += " (" + std::to_string(gpus[i].memory_bytes >> 30) + " GiB)";
    }
  }
  return out;
}

Status GpusFromNvml(const std::string& library, std::vector<GpuInfo>* out) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Unavailable(library + " not found (no NVIDIA driver?)");
  auto sym = [lib](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<CountFn>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<StringFn>(sym("nvmlDeviceGetName"));
  auto uuid = reinterpret_cast<StringFn>(sym("nvmlDeviceGetUUID"));
  auto memory = reinterpret_cast<MemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  auto error = reinterpret_cast<ErrorFn>(sym("nvmlErrorString"));
  if (!init || !shutdown || !count || !handle || !name || !uuid || !memory) {
    dlclose(lib);
    return Unavailable(library + " lacks the NVML functions expected (too old a driver?)");
  }
  auto text = [error](NvmlReturn r) {
    return error != nullptr ? std::string(error(r)) : "NVML error " + std::to_string(r);
  };
  NvmlReturn r = init();
  if (r != 0) {
    dlclose(lib);
    return Unavailable("nvmlInit: " + text(r));
  }
  unsigned int n = 0;
  Status s;
  if ((r = count(&n)) != 0) s = Unavailable("nvmlDeviceGetCount: " + text(r));
  for (unsigned int i = 0; s.ok() && i < n; ++i) {
    NvmlDevice dev = nullptr;
    if ((r = handle(i, &dev)) != 0) {
      s = Unavailable("nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + text(r));
      break;
    }
    GpuInfo g;
    g.index = static_cast<int>(i);
    char buf[128] = {};
    if (name(dev, buf, sizeof buf - 1) == 0) g.name = buf;
    std::memset(buf, 0, sizeof buf);
    if (uuid(dev, buf, sizeof buf - 1) == 0) g.uuid = buf;
    NvmlMemory mem{};
    if (memory(dev, &mem) == 0) g.memory_bytes = mem.total;
    out->push_back(std::move(g));
  }
  shutdown();
  dlclose(lib);
  return s;
}

Status ParseNvidiaSmiCsv(const std::string& csv, std::vector<GpuInfo>* out) {
  std::istringstream in(csv);
  std::vector<GpuInfo> gpus;
  for (std::string line; std::getline(in, line);) {
    if (Trim(line).empty()) continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(Trim(x));
    char* end = nullptr;
    const long index = f.empty() ? -1 : std::strtol(f[0].c_str(), &end, 10);
    if (f.size() != 4 || f[0].empty() || *end != '\0' || index < 0) {
      return InvalidArgument("nvidia-smi printed an unexpected line: '" + line + "'");
    }
    GpuInfo g;
    g.index = static_cast<int>(index);
    g.name = f[1];
    g.uuid = f[2];
    g.memory_bytes = std::strtoull(f[3].c_str(), nullptr, 10) << 20;  // MiB
    gpus.push_back(std::move(g));
  }
  *out = std::move(gpus);
  return Status::OK();
}

Status GpusFromNvidiaSmi(const std::string& program, std::chrono::milliseconds deadline,
                         std::vector<GpuInfo>* out) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Unavailable(std::string("pipe: ") + strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {program, "--query-gpu=index,name,uuid,memory.total",
                                   "--format=csv,noheader,nounits"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return Unavailable(program + ": " + strerror(rc));
  }
  std::string output;
  const auto until = Clock::now() + deadline;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(pipe_fds[0], buf, sizeof buf);
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Unavailable(program + " did not answer within " + std::to_string(deadline.count()) +
                       " ms (a wedged driver?)");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Unavailable(program + " failed (" +
                       (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status))) +
                       ")");
  }
  return ParseNvidiaSmiCsv(output, out);
}

GpuInventory DiscoverGpus(std::chrono::milliseconds smi_deadline) {
  GpuInventory inv;
  std::vector<GpuInfo> gpus;
  Status s = GpusFromNvml("libnvidia-ml.so.1", &gpus);
  if (s.ok() && !gpus.empty()) {
    inv.gpus = std::move(gpus);
    inv.source = "NVML";
    return inv;
  }
  inv.notes = "NVML: " + (s.ok() ? std::string("no device") : s.message());
  gpus.clear();
  s = GpusFromNvidiaSmi("nvidia-smi", smi_deadline, &gpus);
  if (s.ok() && !gpus.empty()) {
    inv.gpus = std::move(gpus);
    inv.source = "nvidia-smi";
    return inv;
  }
  inv.notes += "; nvidia-smi: " + (s.ok() ? std::string("no device") : s.message());
  const int nodes = CountNvidiaDevices();
  for (int i = 0; i < nodes; ++i) inv.gpus.push_back(GpuInfo{i, "", "", 0});
  inv.source = nodes > 0 ? "/dev" : "none";
  if (nodes == 0) inv.notes += "; no /dev/nvidiaN";
  return inv;
}

}  // namespace hvd::agent
