#include "control/spec_limits.h"

#include <set>
#include <string>

#include "control/worker_env.h"

namespace hvd::control {
namespace {

std::string Limit(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + ByteSize(bytes) + ")";
}

// A string field within `max` bytes and without NUL (which exec and C strings would cut).
Status CheckText(const std::string& what, const std::string& value, size_t max) {
  if (value.size() > max) {
    return InvalidArgument(what + " is " + std::to_string(value.size()) +
                           " bytes long; the limit is " + Limit(max));
  }
  if (value.find('\0') != std::string::npos) {
    return InvalidArgument(what + " contains a NUL byte");
  }
  return Status::OK();
}

Status CheckArgv(const JobSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgument(
        "the job has no program: give the command to run after the options (hvdrun -np 2 "
        "./train.py)");
  }
  if (spec.argv.size() > kMaxArgvEntries) {
    return InvalidArgument("the command line has " + std::to_string(spec.argv.size()) +
                           " arguments; the limit is " + std::to_string(kMaxArgvEntries) +
                           ": pass long lists in a file");
  }
  size_t total = 0;
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    const std::string& a = spec.argv[i];
    HVD_RETURN_IF_ERROR(
        CheckText("argument " + std::to_string(i) + " of the command line", a, kMaxArgBytes));
    total += a.size() + 1;
  }
  if (total > kMaxArgvBytes) {
    return InvalidArgument("the command line is " + std::to_string(total) +
                           " bytes long; the limit is " + Limit(kMaxArgvBytes) +
                           ": pass long arguments in a file");
  }
  return Status::OK();
}

Status CheckEnv(const JobSpec& spec) {
  if (spec.env.size() > kMaxEnvEntries) {
    return InvalidArgument("the job's environment (-x and the forwarded environment) has " +
                           std::to_string(spec.env.size()) + " variables; the limit is " +
                           std::to_string(kMaxEnvEntries));
  }
  size_t total = 0;
  for (const auto& [name, value] : spec.env) {
    HVD_RETURN_IF_ERROR(CheckText("the name of environment variable '" + name.substr(0, 64) + "'",
                                  name, kMaxEnvNameBytes));
    HVD_RETURN_IF_ERROR(CheckText("environment variable " + name.substr(0, 64) + " (-x)", value,
                                  kMaxArgBytes - name.size() - 1));
    total += name.size() + value.size() + 2;  // NAME=VALUE and its NUL, as exec counts it
  }
  if (total > kMaxEnvBytes) {
    return InvalidArgument("the job's environment (-x and the forwarded environment) is " +
                           std::to_string(total) + " bytes; the limit is " + Limit(kMaxEnvBytes) +
                           ": pass large values in a file");
  }
  return ValidateJobEnv(spec.env);
}

Status CheckHosts(const JobSpec& spec) {
  if (spec.hosts.size() > static_cast<size_t>(kMaxHostEntries)) {
    return InvalidArgument("the host list has " + std::to_string(spec.hosts.size()) +
                           " entries; the limit is " + std::to_string(kMaxHostEntries));
  }
  int64_t total = 0;
  std::set<std::string> seen;
  for (const HostRequest& h : spec.hosts) {
    HVD_RETURN_IF_ERROR_CTX(CheckHostName(h.host), "host list (-H)");
    if (h.slots < 1 || h.slots > kMaxSlotsPerHost) {
      return InvalidArgument("host list (-H): host " + h.host + " is given " +
                             std::to_string(h.slots) + " slots; give each host 1.." +
                             std::to_string(kMaxSlotsPerHost) + " (-H " + h.host + ":N)");
    }
    if (!seen.insert(h.host).second) {
      return InvalidArgument("host list (-H): host " + h.host +
                             " is listed twice; list each host once with its total slots");
    }
    total += h.slots;
  }
  if (!spec.hosts.empty() && total < spec.np) {
    return InvalidArgument("np=" + std::to_string(spec.np) + " but the host list gives only " +
                           std::to_string(total) +
                           " slots; raise the hosts' slots (-H host:N) or lower np");
  }
  return Status::OK();
}

}  // namespace

std::string ByteSize(size_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

Status CheckJobTimeoutMs(const char* field, const char* flag, int64_t ms) {
  if (ms < 0 || ms > kMaxJobTimeoutMs) {
    return InvalidArgument(std::string(field) + "=" + std::to_string(ms) + " (" + flag +
                           ") is out of range: give 0.." + std::to_string(kMaxJobTimeoutMs) +
                           " ms (30 days)");
  }
  return Status::OK();
}

Status CheckStdinRank(int rank, int np) {
  if (rank < 0 || rank >= np) {
    return InvalidArgument("--stdin " + std::to_string(rank) + " names no rank of the job (np=" +
                           std::to_string(np) + "); give a rank below np, or none");
  }
  return Status::OK();
}

Status ValidateJobSpec(const JobSpec& spec) {
  HVD_RETURN_IF_ERROR(CheckArgv(spec));
  if (spec.np < 1 || spec.np > kMaxRanks) {
    return InvalidArgument("np=" + std::to_string(spec.np) + " is out of range [1, " +
                           std::to_string(kMaxRanks) + "]; pass -np N");
  }
  HVD_RETURN_IF_ERROR(CheckHosts(spec));
  HVD_RETURN_IF_ERROR(CheckEnv(spec));
  HVD_RETURN_IF_ERROR(
      CheckText("the working directory (--working-dir)", spec.working_dir, kMaxPathBytes));
  HVD_RETURN_IF_ERROR(CheckText("the job name (--name)", spec.name, kMaxJobNameBytes));
  HVD_RETURN_IF_ERROR(
      CheckText("--network-interface", spec.network_interfaces, kMaxInterfacesTextBytes));
  // -1: unset, the launcher's default.
  if (spec.kill_grace_ms != -1) {
    HVD_RETURN_IF_ERROR(CheckJobTimeoutMs("kill_grace_ms", "--kill-grace", spec.kill_grace_ms));
  }
  if (spec.start_timeout_ms != -1) {
    HVD_RETURN_IF_ERROR(
        CheckJobTimeoutMs("start_timeout_ms", "--start-timeout", spec.start_timeout_ms));
  }
  if (spec.stall_timeout_ms != -1) {
    HVD_RETURN_IF_ERROR(
        CheckJobTimeoutMs("stall_timeout_ms", "--stall-timeout", spec.stall_timeout_ms));
  }
  HVD_RETURN_IF_ERROR(
      CheckJobTimeoutMs("queue_timeout_ms", "--queue-timeout", spec.queue_timeout_ms));
  if (spec.max_restarts < 0 || spec.max_restarts > kMaxJobRestarts) {
    return InvalidArgument("--max-restarts must be between 0 and " +
                           std::to_string(kMaxJobRestarts) + ", not " +
                           std::to_string(spec.max_restarts));
  }
  if (!spec.run_as.empty()) HVD_RETURN_IF_ERROR(CheckUserName(spec.run_as));
  if (spec.stdin_rank != -1) HVD_RETURN_IF_ERROR(CheckStdinRank(spec.stdin_rank, spec.np));
  return CheckElastic(spec);
}

Status CheckHostList(const JobSpec& spec) {
  return CheckHosts(spec);
}

Status CheckElastic(const JobSpec& spec) {
  if (spec.min_np == 0 && spec.max_np == 0) return Status::OK();  // a fixed job
  const std::string given = "--min-np " + std::to_string(spec.min_np) + ", -np " +
                            std::to_string(spec.np) + ", --max-np " + std::to_string(spec.max_np);
  if (spec.min_np < 1 || spec.min_np > spec.np || spec.np > spec.max_np ||
      spec.max_np > kMaxRanks) {
    return InvalidArgument("elastic job: need 1 <= --min-np <= -np <= --max-np <= " +
                           std::to_string(kMaxRanks) + "; got " + given);
  }
  if (spec.elastic_timeout_ms < 1 || spec.elastic_timeout_ms > kMaxJobTimeoutMs) {
    return InvalidArgument("--elastic-timeout must be more than 0 and at most 30 days, not " +
                           std::to_string(spec.elastic_timeout_ms) + " ms");
  }
  if (spec.cooldown_min_ms != 0 || spec.cooldown_max_ms != 0) {
    if (spec.cooldown_min_ms < 1 || spec.cooldown_min_ms > spec.cooldown_max_ms ||
        spec.cooldown_max_ms > kMaxJobTimeoutMs) {
      return InvalidArgument(
          "--blacklist-cooldown-range MIN MAX needs 0 < MIN <= MAX <= 2592000 "
          "seconds, not " +
          std::to_string(spec.cooldown_min_ms / 1000) + " " +
          std::to_string(spec.cooldown_max_ms / 1000));
    }
  }
  if (spec.reset_limit < 0 || spec.reset_limit > 1000000) {
    return InvalidArgument("--reset-limit must be between 0 (no limit) and 1000000, not " +
                           std::to_string(spec.reset_limit));
  }
  return Status::OK();
}

Status CheckUserName(const std::string& name) {
  const std::string shown = name.substr(0, kMaxUserNameBytes + 8);
  const auto refuse = [&](const std::string& why) {
    return InvalidArgument("--run-as '" + shown + "': " + why +
                           "; give the name of a user that exists on every host of the job");
  };
  if (name.empty()) return refuse("the user name is empty");
  if (name.size() > kMaxUserNameBytes) {
    return refuse("a user name has at most " + std::to_string(kMaxUserNameBytes) + " bytes");
  }
  if (name[0] == '-') return refuse("a user name does not start with '-'");
  bool all_digits = true;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || (c == '$' && i + 1 == name.size());
    if (!ok) return refuse("a user name has only letters, digits, '.', '_', '-' (and a final '$')");
    if (c < '0' || c > '9') all_digits = false;
  }
  if (all_digits) {
    return refuse("a number is a uid, not a user name (each host maps names to its own uids)");
  }
  if (name == "." || name == "..") return refuse("not a user name");
  return Status::OK();
}

Status ValidateAgentInfo(const AgentInfo& info) {
  const std::string host = info.host.substr(0, 64);
  if (info.host.empty()) {
    return InvalidArgument(
        "agent registration needs a host name; start hvd-agent with --host NAME (or fix the "
        "machine's hostname)");
  }
  if (Status s = CheckHostName(info.host); !s.ok()) {
    return InvalidArgument("agent registration: " + s.message() +
                           "; start hvd-agent with --host NAME");
  }
  if (info.slots < 1 || info.slots > kMaxSlotsPerHost) {
    return InvalidArgument("agent registration from host '" + host + "' offers " +
                           std::to_string(info.slots) + " slots; an agent has 1.." +
                           std::to_string(kMaxSlotsPerHost) + " (hvd-agent --slots N)");
  }
  if (info.gpus < 0 || info.gpus > kMaxSlotsPerHost) {
    return InvalidArgument("agent registration from host '" + host + "' reports " +
                           std::to_string(info.gpus) + " GPUs; the limit is 0.." +
                           std::to_string(kMaxSlotsPerHost));
  }
  if (!info.id.empty()) {
    // Ids are the launcher's own (host-hex), kept by the agent across reconnects.
    HVD_RETURN_IF_ERROR_CTX(CheckText("agent id", info.id, kMaxAgentIdBytes),
                            "agent registration from host '" + host + "'");
    HVD_RETURN_IF_ERROR_CTX(CheckHostName(info.id),
                            "agent registration from host '" + host + "': agent id");
  }
  const std::string from = "agent registration from host '" + host + "'";
  HVD_RETURN_IF_ERROR_CTX(
      CheckText("advertise address", info.advertise_addr, kMaxAdvertiseAddrBytes), from);
  HVD_RETURN_IF_ERROR_CTX(CheckText("version", info.version, kMaxVersionBytes), from);
  HVD_RETURN_IF_ERROR_CTX(
      CheckText("advertise interface", info.advertise_iface, kMaxInterfaceNameBytes), from);
  if (info.interfaces.size() > static_cast<size_t>(kMaxAgentInterfaces)) {
    return InvalidArgument(from + " lists " + std::to_string(info.interfaces.size()) +
                           " interface addresses; the limit is " +
                           std::to_string(kMaxAgentInterfaces));
  }
  for (const NetInterface& i : info.interfaces) {
    HVD_RETURN_IF_ERROR_CTX(CheckText("interface name", i.name, kMaxInterfaceNameBytes), from);
    HVD_RETURN_IF_ERROR_CTX(CheckText("interface address", i.address, kMaxAdvertiseAddrBytes),
                            from);
    if (i.prefix_len < 0 || i.prefix_len > 32) {
      return InvalidArgument(from + ": interface " + i.name.substr(0, 64) + " has prefix /" +
                             std::to_string(i.prefix_len) + "; IPv4 prefixes are 0..32");
    }
  }
  return Status::OK();
}

}  // namespace hvd::control
