#include "cli/elastic_flags.h"

#include <cmath>

#include "base/settings.h"
#include "control/spec_limits.h"

namespace hvd::cli {

void ElasticFlags::Register(control::FlagSet* flags) {
  flags->Int("--min-np,--min-num-proc", &min_np,
             "elastic job: the fewest workers it runs with (default: -np); a worker that fails "
             "leaves and the others go on, re-formed in place (docs/elastic.md)");
  flags->Int("--max-np,--max-num-proc", &max_np,
             "elastic job: the most workers it uses (default: -np); the launcher adds workers "
             "on free slots of its agents up to it");
  flags->Double("--elastic-timeout", &elastic_timeout,
                "elastic job: seconds it may run below --min-np workers before it fails "
                "(default 600)");
  flags->String("--host-discovery-script", &discovery_script,
                "elastic job: a command printing the hosts it may use, one HOST:SLOTS (or HOST) "
                "per line; run before the job starts (its -H) and every second while hvdrun "
                "follows it: new hosts' agents get workers up to --max-np (docs/elastic.md)");
  flags->Pair("--blacklist-cooldown-range", &cooldown_range,
              "elastic job: seconds MIN MAX a host stays left out after its agent was lost or "
              "two of the job's workers failed there: MIN, doubling each time, up to MAX "
              "(default: for the job's life)");
  flags->Int("--reset-limit", &reset_limit,
             "elastic job: how many times its membership may change before it fails (default "
             "0: no limit)");
}

bool ElasticFlags::Given(const control::FlagSet* flags) const {
  // As horovodrun: a discovery script makes the job elastic too.
  return flags != nullptr && (flags->Given("--min-np") || flags->Given("--max-np") ||
                              flags->Given("--host-discovery-script"));
}

Status ElasticFlags::Apply(const control::FlagSet* flags, control::JobSpec* spec) const {
  if (!Given(flags)) {
    for (const char* f : {"--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range"}) {
      if (flags != nullptr && flags->Given(f)) {
        return InvalidArgument(std::string(f) +
                               ": applies to elastic jobs only; instead, give --min-np N (and "
                               "--max-np M) with it (docs/elastic.md)");
      }
    }
    return Status::OK();
  }
  if (min_np < 0 || max_np < 0 || min_np > (1 << 20) || max_np > (1 << 20)) {
    return InvalidArgument("--min-np and --max-np must be positive numbers of workers");
  }
  // 0 given is not "unset" (it ran the job as if -np had been given).
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--min-np", min_np},
                                    std::pair<const char*, int64_t>{"--max-np", max_np}}) {
    if (flags->Given(flag) && value == 0) {
      return InvalidArgument(flags->GivenAs(flag) +
                             " 0: an elastic job needs at least 1 worker (leave it out for -np)");
    }
  }
  spec->min_np = static_cast<int>(min_np > 0 ? min_np : spec->np);
  spec->max_np = static_cast<int>(max_np > 0 ? max_np : spec->np);
  if (!(elastic_timeout > 0) || elastic_timeout > 30 * 86400) {
    return InvalidArgument(
        "--elastic-timeout must be a number of seconds above 0 and at most "
        "2592000 (30 days)");
  }
  spec->elastic_timeout_ms = static_cast<int64_t>(std::llround(elastic_timeout * 1000));
  if (reset_limit < 0 || reset_limit > 1000000) {
    return InvalidArgument("--reset-limit must be between 0 (no limit) and 1000000");
  }
  spec->reset_limit = static_cast<int>(reset_limit);
  if (!cooldown_range.empty()) {
    double lo = -1, hi = -1;
    const size_t comma = cooldown_range.find(',');
    if (comma == std::string::npos ||
        !base::ParseDouble(cooldown_range.substr(0, comma), &lo).ok() ||
        !base::ParseDouble(cooldown_range.substr(comma + 1), &hi).ok() || !(lo > 0) ||
        !(hi >= lo) || hi > 30 * 86400) {
      return InvalidArgument(
          "--blacklist-cooldown-range: give two numbers of seconds MIN MAX with "
          "0 < MIN <= MAX (e.g. --blacklist-cooldown-range 10 100), not '" +
          cooldown_range + "'");
    }
    spec->cooldown_min_ms = std::llround(lo * 1000);
    spec->cooldown_max_ms = std::llround(hi * 1000);
  }
  return control::CheckElastic(*spec);
}

}  // namespace hvd::cli
