// Shared by the benchmarks in bench/: a fork launcher that runs N ranks on this host (or joins a
// job hvdrun started), argument parsing helpers, the machine line and timing helpers.
//
// Exit codes are shared too, so the launcher can tell "a rank computed wrong results" (reported,
// the run goes on) from "a rank failed" (the others are killed).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd::bench {

constexpr int kExitWrong = 1;   // a rank saw wrong results
constexpr int kExitUsage = 2;   // bad arguments or environment
constexpr int kExitFailed = 3;  // a rank failed (or was killed, or the launcher was interrupted)

using Clock = std::chrono::steady_clock;

// ---- Arguments ----

// A base-10 integer in [lo, hi], nothing else in `s`.
bool ParseInt(const char* s, long long lo, long long hi, long long* out);

// "4096", "4K", "256M", "1G" (binary multiples), 1 byte .. 1 TiB.
bool ParseBytes(std::string s, size_t* out);

// "4K,64K,1M": a comma-separated list of ParseBytes sizes, at least one.
bool ParseByteList(const std::string& s, std::vector<size_t>* out);

// Walks argv as "FLAG VALUE" pairs, the form every benchmark flag takes. -h/--help calls
// usage(""); a flag without a value calls usage("FLAG: missing value (see usage)"). For each pair,
// handle(flag, value, bad) returns false for a flag it does not know (usage names it);
// bad(form) reports a malformed value as "FLAG: expected FORM, got 'VALUE'".
// REQUIRES: usage does not return.
using BadValue = std::function<void(const char* form)>;
void ParseFlagPairs(int argc, char** argv,
                    const std::function<void(const std::string& error)>& usage,
                    const std::function<bool(const std::string& flag, const char* value,
                                             const BadValue& bad)>& handle);

// The -np flag the forking benchmarks share: true when `flag` is -np (then *np is set, or bad()
// called for a value outside 1..64, and *np_given becomes true); false for any other flag.
bool ParseNpFlag(const std::string& flag, const char* value, const BadValue& bad, int* np,
                 bool* np_given);

// ---- Ranks ----

// Who this process is in a job, as hvd::Init() reads it from HVD_RANK, HVD_SIZE and
// HVD_RENDEZVOUS.
struct RankEnv {
  int rank = 0;
  int size = 1;
  std::string rendezvous;  // "file:///dir"
  // Under a launcher (HVD_JOB_ID set): the attempt's key scope, "job/<id>/attempt/<n>", which is
  // all the job's secret grants; a rank's own keys go under it. Empty: the store is the bench's.
  std::string scope;
};

// The rank HVD_SIZE/HVD_RANK/HVD_RENDEZVOUS describe, when HVD_SIZE is set (e.g. under hvdrun).
// nullopt with an empty *error when HVD_SIZE is unset (the caller forks its own ranks); nullopt
// with *error naming the variable when a value is invalid or disagrees with `np_flag` (the -np
// the user gave; 0 when none).
std::optional<RankEnv> RankFromEnvironment(int np_flag, std::string* error);

// One rank's work; returns its exit code (0, kExitWrong or kExitFailed).
using RankMain = std::function<int(const RankEnv& env)>;

// Forks `np` processes, each running rank_main for its rank with HVD_RANK, HVD_SIZE and
// HVD_RENDEZVOUS (a fresh temp directory), plus `extra_env`, in its environment, so hvd::Init()
// finds them. Ranks die with the launcher (PR_SET_PDEATHSIG). Reaps every rank; the first rank
// to fail (or a SIGINT/SIGTERM to the launcher) kills the rest, since the survivors would
// otherwise wait on it until their peer timeout. Removes the temp directory. Returns 0,
// kExitWrong (some rank said so, none failed) or kExitFailed. `prog` prefixes messages.
int LaunchRanks(const char* prog, int np, const RankMain& rank_main,
                const std::vector<std::pair<std::string, std::string>>& extra_env = {});

// True once a SIGINT or SIGTERM has stopped a LaunchRanks: launch nothing more.
bool Interrupted();

// ---- Machine and timing ----

// "<CPU model>, nproc <n>, <kernel> <release> <arch>": what a result was measured on.
std::string MachineLine();

double SecondsSince(Clock::time_point start);

// Seconds per call of `fn`, doubling the repetitions until a loop lasts `min_seconds`.
double TimePerCall(const std::function<void()>& fn, double min_seconds);

// The median of `v` (the mean of the middle two for an even count); 0 for an empty `v`.
double Median(std::vector<double> v);

}  // namespace hvd::bench
