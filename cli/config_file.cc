#include "cli/config_file.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "control/text.h"

namespace hvd::cli {
namespace {

using control::Trim;
using control::TrimRight;

// The line without its comment: '#' at the start or after a space, outside quotes.
std::string_view StripComment(std::string_view line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

// A scalar as YAML reads it: 'single' ('' is a quote), "double" (with \" \\ \n \t), or plain.
Status Unquote(std::string_view v, std::string* out) {
  out->clear();
  if (v.empty()) return Status::OK();
  const char q = v.front();
  if (q != '\'' && q != '"') {
    if (q == '[' || q == '{' || q == '&' || q == '*' || q == '|' || q == '>' || q == '!') {
      return InvalidArgument("'" + std::string(v) +
                             "': flow collections, anchors, tags and block scalars are not "
                             "supported; write a plain or quoted scalar");
    }
    *out = std::string(v);
    return Status::OK();
  }
  size_t i = 1;
  for (; i < v.size(); ++i) {
    const char c = v[i];
    if (q == '\'' && c == '\'') {
      if (i + 1 < v.size() && v[i + 1] == '\'') {
        out->push_back('\'');
        ++i;
        continue;
      }
      break;
    }
    if (q == '"' && c == '"') break;
    if (q == '"' && c == '\\' && i + 1 < v.size()) {
      const char e = v[++i];
      out->push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
      continue;
    }
    out->push_back(c);
  }
  if (i >= v.size()) return InvalidArgument("unterminated " + std::string(1, q) + " string");
  if (!Trim(v.substr(i + 1)).empty()) {
    return InvalidArgument("text after the closing quote: '" + std::string(v.substr(i + 1)) + "'");
  }
  return Status::OK();
}

// YAML 1.1 booleans as PyYAML (Horovod's reader) resolves them: true/yes/on and false/no/off in
// lower, Capitalized or UPPER case. Not y/n (PyYAML reads them as strings) nor mixed case.
bool YamlBool(const std::string& v, bool* b) {
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
    if (v == t) {
      *b = true;
      return true;
    }
  }
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}) {
    if (v == f) {
      *b = false;
      return true;
    }
  }
  return false;
}

// YAML's null, as PyYAML resolves a plain scalar: a section written `params: ~` has no keys.
bool YamlNull(std::string_view v) {
  return v == "~" || v == "null" || v == "Null" || v == "NULL";
}

constexpr const char* kSections[] = {"params",      "autotune",        "timeline",
                                     "stall_check", "library_options", "logging"};

// How a Horovod key becomes a flag: `flag` takes the value as is; a boolean key picks the switch
// `if_true` or `if_false`, and either of them on the command line overrides the file.
struct KeyMap {
  const char* section;
  const char* key;
  const char* flag;      // value flag, or nullptr for a boolean key
  const char* if_true;   // boolean key: the switch for true
  const char* if_false;  // boolean key: the switch for false
};

// Horovod 0.28's config_parser.set_args_from_config, key by key.
constexpr KeyMap kKeys[] = {
    {"params", "fusion_threshold_mb", "--fusion-threshold-mb", nullptr, nullptr},
    {"params", "cycle_time_ms", "--cycle-time-ms", nullptr, nullptr},
    {"params", "cache_capacity", "--cache-capacity", nullptr, nullptr},
    {"params", "hierarchical_allreduce", nullptr, "--hierarchical-allreduce",
     "--no-hierarchical-allreduce"},
    {"params", "hierarchical_allgather", nullptr, "--hierarchical-allgather",
     "--no-hierarchical-allgather"},
    {"autotune", "enabled", nullptr, "--autotune", "--no-autotune"},
    {"autotune", "log_file", "--autotune-log-file", nullptr, nullptr},
    {"autotune", "warmup_samples", "--autotune-warmup-samples", nullptr, nullptr},
    {"autotune", "steps_per_sample", "--autotune-steps-per-sample", nullptr, nullptr},
    {"autotune", "bayes_opt_max_samples", "--autotune-bayes-opt-max-samples", nullptr, nullptr},
    {"autotune", "gaussian_process_noise", "--autotune-gaussian-process-noise", nullptr, nullptr},
    {"timeline", "filename", "--timeline-filename", nullptr, nullptr},
    {"timeline", "mark_cycles", nullptr, "--timeline-mark-cycles", "--no-timeline-mark-cycles"},
    {"stall_check", "enabled", nullptr, "--stall-check", "--no-stall-check"},
    {"stall_check", "warning_time_seconds", "--stall-check-warning-time-seconds", nullptr, nullptr},
    {"stall_check", "shutdown_time_seconds", "--stall-check-shutdown-time-seconds", nullptr,
     nullptr},
    {"library_options", "mpi_threads_disable", nullptr, "--mpi-threads-disable",
     "--no-mpi-threads-disable"},
    {"library_options", "num_nccl_streams", "--num-nccl-streams", nullptr, nullptr},
    {"library_options", "thread_affinity", "--thread-affinity", nullptr, nullptr},
    {"library_options", "gloo_timeout_seconds", "--gloo-timeout-seconds", nullptr, nullptr},
    {"logging", "level", "--log-level", nullptr, nullptr},
    {"logging", "with_timestamp", nullptr, "--log-with-timestamp", "--log-without-timestamp"},
};

std::string KeysOf(const std::string& section) {
  std::string out;
  for (const KeyMap& k : kKeys) {
    if (section == k.section) out += (out.empty() ? "" : ", ") + std::string(k.key);
  }
  return out;
}

}  // namespace

Status ParseSimpleYaml(std::string_view content, const std::string& source,
                       std::vector<YamlScalar>* out) {
  std::vector<YamlScalar> result;
  std::string section;
  int section_indent = -1;  // the indent of the current section's keys, once seen
  bool section_open = false;
  std::map<std::string, int> top_lines;  // each top-level key (a section or a scalar): its line
  int line_no = 0;
  // A byte order mark (Windows editors write one) is no part of the first key, as for PyYAML.
  for (const std::string_view raw : control::SplitLines(control::StripUtf8Bom(content))) {
    ++line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    auto error = [&](const std::string& what) {
      return InvalidArgument(where + ": " + what + " (in '" + std::string(Trim(raw)) + "')");
    };
    const std::string_view text = TrimRight(StripComment(raw));
    if (Trim(text).empty()) continue;
    if (text == "---" || text == "...") continue;  // document markers
    size_t indent = 0;
    while (indent < text.size() && text[indent] == ' ') ++indent;
    if (indent < text.size() && text[indent] == '\t') {
      return error("a tab in the indentation; YAML indents with spaces");
    }
    const std::string_view body = text.substr(indent);
    if (body.front() == '-') return error("lists are not supported; write 'key: value'");
    const size_t colon = body.find(':');
    if (colon == std::string_view::npos || (colon + 1 < body.size() && body[colon + 1] != ' ')) {
      return error("expected 'key: value' or 'section:'");
    }
    const std::string key(Trim(body.substr(0, colon)));
    const std::string_view value_text = Trim(body.substr(colon + 1));
    if (key.empty()) return error("empty key");
    YamlScalar scalar;
    scalar.key = key;
    scalar.line = line_no;
    if (indent == 0) {
      // PyYAML (horovodrun's reader) keeps only the last of two equal keys: a section given
      // twice would lose the first one's settings there. Refused: neither reading is surely
      // what was meant.
      if (const auto [it, added] = top_lines.emplace(key, line_no); !added) {
        return error("'" + key + "' is already on line " + std::to_string(it->second) +
                     "; give each section or key once");
      }
      section_open = value_text.empty();
      section = section_open ? key : "";
      section_indent = -1;
      if (section_open) continue;
      // `params: ~`: a section without keys (a scalar `controller: ~` sets nothing either).
      scalar.is_null = YamlNull(value_text);
    } else {
      if (!section_open) return error("indented, but no 'section:' line opens it");
      if (section_indent < 0) section_indent = static_cast<int>(indent);
      if (static_cast<int>(indent) != section_indent) {
        return error("indented " + std::to_string(indent) + " spaces where this section's keys " +
                     "are indented " + std::to_string(section_indent) +
                     "; sections hold 'key: value' lines only, indented alike");
      }
      if (value_text.empty()) return error("'" + key + ":' has no value; nesting stops here");
      scalar.section = section;
    }
    Status s = Unquote(value_text, &scalar.value);
    if (!s.ok()) return error(s.message());
    for (const YamlScalar& seen : result) {
      if (seen.section == scalar.section && seen.key == scalar.key) {
        return error("'" + key + "' is already set on line " + std::to_string(seen.line));
      }
    }
    result.push_back(std::move(scalar));
  }
  *out = std::move(result);
  return Status::OK();
}

Status HorovodConfigEntries(const std::vector<YamlScalar>& scalars, const std::string& source,
                            std::vector<control::FlagSet::ConfigEntry>* out) {
  std::vector<control::FlagSet::ConfigEntry> entries;
  // Horovod reads autotune's other keys only when autotune.enabled is true: with it false or
  // absent they configure nothing there either.
  bool autotune = false;
  for (const YamlScalar& y : scalars) {
    if (y.section == "autotune" && y.key == "enabled") (void)YamlBool(y.value, &autotune);
  }
  for (const YamlScalar& y : scalars) {
    const std::string where = source + ":" + std::to_string(y.line);
    const std::string name = y.section.empty() ? y.key : y.section + "." + y.key;
    if (y.section.empty()) {
      bool is_section = false;
      for (const char* sec : kSections) is_section = is_section || y.key == sec;
      if (y.is_null && (is_section || y.key == "controller")) continue;  // empty: sets nothing
      if (is_section) {
        return InvalidArgument(where + ": '" + y.key + "' is a section: write '" + y.key +
                               ":' alone on its line and its keys indented below it, not '" +
                               y.value + "'");
      }
      if (y.key != "controller") {
        return InvalidArgument(
            where + ": '" + y.key +
            "' is not a key or section Horovod's config file has (controller, "
            "params, autotune, timeline, stall_check, library_options, logging)");
      }
      std::string c = y.value;
      for (char& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (c != "gloo" && c != "mpi") {
        return InvalidArgument(where + ": controller '" + y.value +
                               "' is not one of gloo, mpi (as Horovod)");
      }
      entries.push_back({"--" + c, "true", where, {"--gloo", "--mpi"}});
      continue;
    }
    const KeyMap* map = nullptr;
    for (const KeyMap& k : kKeys) {
      if (y.section == k.section && y.key == k.key) map = &k;
    }
    if (map == nullptr) {
      const std::string keys = KeysOf(y.section);
      return InvalidArgument(
          where + ": '" + name + "' is not a setting Horovod 0.28 reads" +
          (keys.empty() ? " (no such section)" : " (its " + y.section + " keys: " + keys + ")") +
          "; remove it or fix its spelling");
    }
    if (y.section == "autotune" && y.key != "enabled" && !autotune) continue;
    if (map->flag != nullptr) {
      entries.push_back({map->flag, y.value, where, {}});
      continue;
    }
    bool b = false;
    if (!YamlBool(y.value, &b)) {
      return InvalidArgument(where + ": '" + name + "' must be true or false, not '" + y.value +
                             "'");
    }
    control::FlagSet::ConfigEntry e{
        b ? map->if_true : map->if_false, "true", where, {map->if_true, map->if_false}};
    if (y.section == "stall_check" && !b) {
      // A stall check configured on the command line overrides the file's disable (the file's
      // own warning_time_seconds does not: with both in the file the disable wins, as Horovod).
      e.overridden_by.insert(e.overridden_by.end(), {"--stall-check-time", "--stall-timeout"});
    }
    entries.push_back(std::move(e));
  }
  *out = std::move(entries);
  return Status::OK();
}

Status LoadHorovodConfig(const std::string& path, std::vector<control::FlagSet::ConfigEntry>* out) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--config-file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<YamlScalar> scalars;
  HVD_RETURN_IF_ERROR(ParseSimpleYaml(ss.str(), path, &scalars));
  return HorovodConfigEntries(scalars, path, out);
}

}  // namespace hvd::cli
