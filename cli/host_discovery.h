// horovodrun's --host-discovery-script for elastic jobs (docs/elastic.md): a command that prints
// the hosts the job may use, one "host:slots" (or "host", which gets --slots-per-host) per line.
// hvdrun runs it through /bin/sh on its own host, as horovodrun does on the driver: once before
// the job is submitted (its hosts are the job's -H), then every second while hvdrun follows the
// job; when the list changes it goes to the launcher (Launcher.UpdateJobHosts), which starts
// workers on new hosts' agents up to --max-np. A run that fails, times out or prints something
// else than host lines is reported once per distinct problem and changes nothing: the job keeps
// the hosts it had.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "control/host_spec.h"
#include "hvd/status.h"

namespace hvd::cli {

// Runs `command` with /bin/sh -c, waiting at most `timeout` (then kills it), and parses its
// standard output. InvalidArgument naming the command and the line for output that is not host
// lines or names no host; Unavailable when it exits non-zero or times out (with its stderr);
// Cancelled, the script killed, once `cancel_fd` (when not -1) becomes readable.
Status RunDiscoveryScript(const std::string& command, std::chrono::milliseconds timeout,
                          int default_slots, std::vector<control::HostSlots>* hosts,
                          int cancel_fd = -1);

class HostDiscovery {
 public:
  struct Options {
    std::string command;
    int default_slots = 1;
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds timeout{10000};
  };
  // `update` gets each changed list (after `initial`); `say` each problem, once per text.
  HostDiscovery(Options options, std::vector<control::HostSlots> initial,
                std::function<Status(const std::vector<control::HostSlots>&)> update,
                std::function<void(const std::string&)> say);
  ~HostDiscovery();  // stops and joins
  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;

  void Stop();

 private:
  void Loop();

  const Options options_;
  std::vector<control::HostSlots> current_;  // the loop's own
  const std::function<Status(const std::vector<control::HostSlots>&)> update_;
  const std::function<void(const std::string&)> say_;
  base::Mutex mu_;
  base::CondVar cv_;
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  const int stop_fd_;   // an eventfd Stop() writes: ends a script that is running
  std::thread thread_;  // last: starts once the members above are initialized
};

}  // namespace hvd::cli
