// What a stall report in a job's status means to the person following it: said once per stall,
// not each time it grows a second older (the launcher's summary carries its age), and its end
// said only when the job made progress (a new elastic generation clears the reports too: its own
// line says what changed, and a stall that goes on in it is reported anew).
#pragma once

#include <string>

#include "control/job_model.h"

namespace hvd::cli {

// The summary with its durations ("for 3 s", "for 2.5 s") blanked: two ages of one stall match.
std::string StallShape(const std::string& stall);

// The line to print for the change from `before` to `after` ("" when there is nothing new):
// "hvdrun: job ID stalled: ..." or "hvdrun: job ID is making progress again".
std::string StallNews(const std::string& job_id, const control::JobStatus& before,
                      const control::JobStatus& after);

}  // namespace hvd::cli
