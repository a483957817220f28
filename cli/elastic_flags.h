// hvdrun's elastic flags, with horovodrun's names (docs/elastic.md): --min-np/--min-num-proc,
// --max-np/--max-num-proc, --elastic-timeout, --reset-limit. Any of the first two makes the job
// elastic: a worker that fails leaves it and the others go on, re-formed in place, while at least
// --min-np live.
#pragma once

#include <cstdint>
#include <string>

#include "control/flags.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::cli {

struct ElasticFlags {
  int64_t min_np = 0;
  int64_t max_np = 0;
  double elastic_timeout = 600;  // seconds, Horovod's default
  int64_t reset_limit = 0;
  std::string discovery_script;  // --host-discovery-script (cli/host_discovery.h)
  std::string cooldown_range;    // --blacklist-cooldown-range MIN MAX, as "MIN,MAX"

  void Register(control::FlagSet* flags);
  // Whether --min-np, --max-np or --host-discovery-script was given (horovodrun's elastic mode).
  bool Given(const control::FlagSet* flags) const;
  // -np when it was not given: --max-np, else --min-np.
  int64_t DefaultNp() const { return max_np > 0 ? max_np : min_np; }
  // Into the spec (np already set): --min-np defaults to -np and --max-np to -np, as horovodrun;
  // the numbers are checked by control::CheckElastic. --elastic-timeout or --reset-limit without
  // --min-np/--max-np is an error rather than ignored.
  Status Apply(const control::FlagSet* flags, control::JobSpec* spec) const;
};

}  // namespace hvd::cli
