// Cluster mode's environment: ranks there start under a remote hvd-agent, which gives them its own
// environment, not hvdrun's. Local mode's ranks inherit hvdrun's environment, and horovodrun
// exports its own to every rank over ssh, so hvdrun copies its environment into the job's
// variables in cluster mode too (run and submit), except the variables that describe this shell
// or this host rather than the job (kNotForwarded, docs/deployment.md "Environment"), and those
// whose names look like secrets (LooksSecret). -x and the knob flags win over a forwarded value;
// -x NAME (or NAME=VALUE) passes a variable held back.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "control/job_model.h"

namespace hvd::cli {

// Exact names never forwarded, and why (one reason per group, in forward_env.cc).
extern const std::vector<std::string> kNotForwarded;
// Name prefixes never forwarded (SSH_, XDG_, BASH_FUNC_...).
extern const std::vector<std::string> kNotForwardedPrefixes;

// Whether `name` looks like a credential's (case-insensitively: containing SECRET, PASSWORD or
// PASSWD; ending in _TOKEN, _API_KEY, _APIKEY, _PRIVATE_KEY, _CREDENTIALS or _AUTH; or TOKEN).
// Such variables are held back: the job's environment is stored in the launcher's jobs.db and
// sent to every agent, so a secret goes there only when the user names it with -x NAME.
bool LooksSecret(const std::string& name);

// Whether hvdrun forwards `name` from its environment to a cluster job's ranks.
bool Forwarded(const std::string& name);

// Adds every forwarded "NAME=VALUE" of `environ_entries` (as in `environ`) that `env` does not
// already set to `env`. `held_back` (may be null) gets the names left out that `env` does not
// set, sorted.
void ForwardEnvironment(const std::vector<std::string>& environ_entries,
                        std::map<std::string, std::string>* env,
                        std::vector<std::string>* held_back);

// This process's environment, as ForwardEnvironment takes it.
std::vector<std::string> CurrentEnvironment();

// ForwardEnvironment(CurrentEnvironment()) into the spec's variables: what run and submit do in
// cluster mode. Returns the names held back.
std::vector<std::string> ForwardEnvironmentToJob(control::JobSpec* spec);

}  // namespace hvd::cli
