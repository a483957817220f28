// horovodrun's --config-file: a YAML file of runtime parameters (horovod/runner/common/util/
// config_parser.py in Horovod 0.28), read here without a YAML library. The subset is the one
// Horovod's files use: a top-level `controller:` and sections (`params:`, `autotune:`,
// `timeline:`, `stall_check:`, `library_options:`, `logging:`) of `key: scalar` lines, with
// comments, blank lines, quoted strings, YAML 1.1 booleans as PyYAML reads them, a leading byte
// order mark and `section: ~` (a section without keys). Each key becomes the hvdrun flag
// of the same meaning; the command line wins over the file, as with horovodrun. What the subset
// does not cover (flow collections, anchors, multi-line scalars) and keys Horovod does not read
// are errors naming file:line, never skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "control/flags.h"
#include "hvd/status.h"

namespace hvd::cli {

// One `key: value` of the file; section is "" for a top-level scalar (`controller: gloo`).
struct YamlScalar {
  std::string section;
  std::string key;
  std::string value;  // unquoted
  int line = 0;
  bool is_null = false;  // a top-level `key: ~` (or null): for a section, one without keys
};

// Parses the YAML subset. Errors are InvalidArgument "SOURCE:LINE: what; how to write it".
Status ParseSimpleYaml(std::string_view content, const std::string& source,
                       std::vector<YamlScalar>* out);

// Maps Horovod's config keys to hvdrun flags (as --config-file's loader). Unknown keys and values
// Horovod would reject are errors naming SOURCE:LINE.
Status HorovodConfigEntries(const std::vector<YamlScalar>& scalars, const std::string& source,
                            std::vector<control::FlagSet::ConfigEntry>* out);

// Reads `path` and maps it: the loader hvdrun's --config-file flag uses.
Status LoadHorovodConfig(const std::string& path, std::vector<control::FlagSet::ConfigEntry>* out);

}  // namespace hvd::cli
