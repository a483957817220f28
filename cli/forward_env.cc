#include "cli/forward_env.h"

#include <algorithm>
#include <cctype>

#include "control/worker_env.h"

extern char** environ;

namespace hvd::cli {

const std::vector<std::string> kNotForwarded = {
    // This shell and this host, not the rank's: its name, directories and shell state. (Ranks run
    // in --working-dir, which defaults to this directory anyway.)
    "HOSTNAME",
    "HOST",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    // This login's desktop and terminal multiplexer sessions, meaningless on another host.
    "DISPLAY",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "SESSION_MANAGER",
    "WINDOWID",
    "TMUX",
    "TMUX_PANE",
    "STY",
    // The agent's own value is what ranks see (every GPU of their host, or with --gpu-isolation
    // their slot's alone: docs/gpu.md); Horovod leaves it out too. -x CUDA_VISIBLE_DEVICES=...
    // still sets it.
    "CUDA_VISIBLE_DEVICES",
    // hvdrun's own: where the launcher is and its token (a secret's path), and this host's network
    // choice and identity; the job's hosts get theirs from their agents.
    "HVD_LAUNCHER",
    "HVD_TOKEN_FILE",
    "HVD_IFACE",
    "HVD_HOSTNAME",
    "HVD_ADVERTISE_ADDR",
    // torchrun's rendezvous, which the launcher sets for the job: in local mode its value wins
    // over one inherited from this shell, so it must here too (-x MASTER_ADDR=... still names
    // a store of the job's own).
    "MASTER_ADDR",
    "MASTER_PORT",
    "ROLE_NAME",
    "TORCHELASTIC_USE_AGENT_STORE",
};

const std::vector<std::string> kNotForwardedPrefixes = {
    "SSH_",        // this login's ssh connection and agent socket
    "XDG_",        // this login's session and runtime directories
    "BASH_FUNC_",  // exported shell functions (Horovod leaves them out too)
};

bool LooksSecret(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto ends = [&](const char* suffix) {
    const std::string s = suffix;
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  auto has = [&](const char* part) { return n.find(part) != std::string::npos; };
  // AWS_SECRET_ACCESS_KEY, CLIENT_SECRET, AWS_SESSION_TOKEN, GITHUB_TOKEN, HF_TOKEN, DB_PASSWORD,
  // OPENAI_API_KEY... (TOKENIZERS_PARALLELISM is no token: only a name ending in one is).
  return has("SECRET") || has("PASSWORD") || has("PASSWD") || n == "TOKEN" || ends("_TOKEN") ||
         ends("_API_KEY") || ends("_APIKEY") || ends("_PRIVATE_KEY") || ends("_CREDENTIALS") ||
         ends("_AUTH");
}

bool Forwarded(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  if (std::find(kNotForwarded.begin(), kNotForwarded.end(), name) != kNotForwarded.end()) {
    return false;
  }
  for (const std::string& p : kNotForwardedPrefixes) {
    if (name.rfind(p, 0) == 0) return false;
  }
  // The job's variables are stored in the launcher's jobs.db and sent to every agent of the job:
  // a credential of this shell goes there only when the user names it (-x NAME).
  if (LooksSecret(name)) return false;
  // Each rank's identity and rendezvous (HVD_RANK, RANK, MASTER_PORT...): set by the launcher per
  // rank; present here only when hvdrun itself runs inside a rank.
  return !control::IsLauncherVariable(name);
}

void ForwardEnvironment(const std::vector<std::string>& environ_entries,
                        std::map<std::string, std::string>* env,
                        std::vector<std::string>* held_back) {
  for (const std::string& e : environ_entries) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = e.substr(0, eq);
    if (!Forwarded(name)) {
      // One the job sets itself (-x NAME) is not held back: it gets there.
      if (held_back != nullptr && !env->count(name)) held_back->push_back(name);
      continue;
    }
    env->emplace(name, e.substr(eq + 1));  // a value the job already sets wins
  }
  if (held_back != nullptr) std::sort(held_back->begin(), held_back->end());
}

std::vector<std::string> ForwardEnvironmentToJob(control::JobSpec* spec) {
  std::map<std::string, std::string> env = spec->env;
  std::vector<std::string> held_back;
  ForwardEnvironment(CurrentEnvironment(), &env, &held_back);
  spec->env.insert(env.begin(), env.end());  // adds; keeps the spec's own values
  return held_back;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace hvd::cli
