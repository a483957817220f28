#include "cli/elastic_flags.h"

#include <cmath>

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
    for (const char* f : {"--elastic-timeout", "--reset-limit"}) {
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
  return control::CheckElastic(*spec);
}

}  // namespace hvd::cli
