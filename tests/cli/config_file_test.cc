// horovodrun's --config-file: the YAML subset reader and the mapping of Horovod's keys to
// hvdrun's flags, on good files (Horovod's own test file among them) and bad ones.
#include "cli/config_file.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::cli {
namespace {

std::vector<YamlScalar> Yaml(const std::string& text) {
  std::vector<YamlScalar> out;
  Status s = ParseSimpleYaml(text, "c.yaml", &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::string YamlError(const std::string& text) {
  std::vector<YamlScalar> out;
  Status s = ParseSimpleYaml(text, "c.yaml", &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
  return s.message();
}

using Entries = std::vector<control::FlagSet::ConfigEntry>;

Entries Map(const std::string& text) {
  Entries out;
  Status s = HorovodConfigEntries(Yaml(text), "c.yaml", &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::string MapError(const std::string& text) {
  Entries out;
  Status s = HorovodConfigEntries(Yaml(text), "c.yaml", &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
  return s.message();
}

// flag=value for each entry, in order.
std::vector<std::string> Flat(const Entries& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.flag + "=" + e.value + "@" + e.where);
  return out;
}

TEST(SimpleYaml, SectionsScalarsCommentsAndQuotes) {
  const auto y = Yaml(
      "# Horovod parameters\n"
      "---\n"
      "controller: gloo   # trailing comment\n"
      "\n"
      "params:\n"
      "  fusion_threshold_mb: 32\n"
      "  cycle_time_ms: 2.5\n"
      "timeline:\n"
      "    filename: 'my #1 ''timeline''.json'\n"
      "    mark_cycles: \"yes\"\r\n");
  ASSERT_EQ(y.size(), 5u);
  EXPECT_EQ(y[0].section, "");
  EXPECT_EQ(y[0].key, "controller");
  EXPECT_EQ(y[0].value, "gloo");
  EXPECT_EQ(y[0].line, 3);
  EXPECT_EQ(y[1].section, "params");
  EXPECT_EQ(y[1].value, "32");
  EXPECT_EQ(y[2].value, "2.5");
  EXPECT_EQ(y[3].section, "timeline");
  EXPECT_EQ(y[3].value, "my #1 'timeline'.json");
  EXPECT_EQ(y[4].value, "yes");
  EXPECT_EQ(y[4].line, 10);
}

TEST(SimpleYaml, WhatTheSubsetLacksIsAnErrorNamingTheLine) {
  EXPECT_HAS(YamlError("params:\n\tcache_capacity: 1\n"), "c.yaml:2: a tab in the indentation");
  EXPECT_HAS(YamlError("params:\n  - a\n"), "c.yaml:2: lists are not supported");
  EXPECT_HAS(YamlError("params: [1, 2]\n"), "c.yaml:1: '[1, 2]': flow collections");
  EXPECT_HAS(YamlError("  cache_capacity: 1\n"), "no 'section:' line opens it");
  EXPECT_HAS(YamlError("params:\n  a: 1\n    b: 2\n"), "c.yaml:3: indented 4 spaces");
  EXPECT_HAS(YamlError("params:\n  a:\n"), "c.yaml:2: 'a:' has no value");
  EXPECT_HAS(YamlError("logging\n"), "c.yaml:1: expected 'key: value'");
  EXPECT_HAS(YamlError("a: 'open\n"), "unterminated ' string");
  EXPECT_HAS(YamlError("params:\n  a: 1\n  a: 2\n"), "c.yaml:3: 'a' is already set on line 2");
  // A section (or a top-level key) twice: PyYAML would keep only the last; refused.
  EXPECT_HAS(YamlError("params:\n  fusion_threshold_mb: 32\nparams:\n  cycle_time_ms: 2\n"),
             "c.yaml:3: 'params' is already on line 1; give each section or key once");
  EXPECT_HAS(YamlError("verbose: 1\nverbose: 2\n"), "c.yaml:2: 'verbose' is already on line 1");
  // The line's text is quoted in the message.
  EXPECT_HAS(YamlError("x\n"), "(in 'x')");
}

// Horovod's own test config (test/single/data/config.test.yaml in Horovod) less the keys hvd
// refuses (autotune enabled, num_nccl_streams, thread affinity), key by key.
TEST(HorovodConfig, EveryKeyBecomesItsFlag) {
  const auto e =
      Flat(Map("controller: gloo\n"
               "params:\n"
               "  fusion_threshold_mb: 32\n"
               "  cycle_time_ms: 10\n"
               "  cache_capacity: 2048\n"
               "  hierarchical_allreduce: true\n"
               "  hierarchical_allgather: false\n"
               "autotune:\n"
               "  enabled: false\n"
               "  warmup_samples: 5\n"
               "timeline:\n"
               "  filename: 'horovod_timeline.json'\n"
               "  mark_cycles: true\n"
               "stall_check:\n"
               "  enabled: true\n"
               "  warning_time_seconds: 120\n"
               "  shutdown_time_seconds: 240\n"
               "library_options:\n"
               "  mpi_threads_disable: true\n"
               "  gloo_timeout_seconds: 60\n"
               "logging:\n"
               "  level: INFO\n"
               "  with_timestamp: false\n"));
  EXPECT_EQ(e, (std::vector<std::string>{
                   "--gloo=true@c.yaml:1",
                   "--fusion-threshold-mb=32@c.yaml:3",
                   "--cycle-time-ms=10@c.yaml:4",
                   "--cache-capacity=2048@c.yaml:5",
                   "--hierarchical-allreduce=true@c.yaml:6",
                   "--no-hierarchical-allgather=true@c.yaml:7",
                   "--no-autotune=true@c.yaml:9",
                   // warmup_samples: inert while autotune is off, in Horovod too
                   "--timeline-filename=horovod_timeline.json@c.yaml:12",
                   "--timeline-mark-cycles=true@c.yaml:13",
                   "--stall-check=true@c.yaml:15",
                   "--stall-check-warning-time-seconds=120@c.yaml:16",
                   "--stall-check-shutdown-time-seconds=240@c.yaml:17",
                   "--mpi-threads-disable=true@c.yaml:19",
                   "--gloo-timeout-seconds=60@c.yaml:20",
                   "--log-level=INFO@c.yaml:22",
                   "--log-without-timestamp=true@c.yaml:23",
               }));
}

TEST(HorovodConfig, SwitchesAreOverriddenByEitherSpelling) {
  const Entries e = Map("params:\n  hierarchical_allreduce: off\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].flag, "--no-hierarchical-allreduce");
  EXPECT_EQ(e[0].overridden_by,
            (std::vector<std::string>{"--hierarchical-allreduce", "--no-hierarchical-allreduce"}));
  const Entries c = Map("controller: MPI\n");
  EXPECT_EQ(c[0].flag, "--mpi");
  EXPECT_EQ(c[0].overridden_by, (std::vector<std::string>{"--gloo", "--mpi"}));
}

TEST(HorovodConfig, AutotuneKeysCountOnlyWhenEnabled) {
  EXPECT_EQ(
      Flat(Map("autotune:\n  enabled: true\n  log_file: a.csv\n")),
      (std::vector<std::string>{"--autotune=true@c.yaml:2", "--autotune-log-file=a.csv@c.yaml:3"}));
  EXPECT_TRUE(Map("autotune:\n  log_file: a.csv\n").empty());
}

TEST(HorovodConfig, KeysHorovodDoesNotReadAreErrors) {
  EXPECT_HAS(MapError("timeline:\n  enabled: true\n"),
             "c.yaml:2: 'timeline.enabled' is not a setting Horovod 0.28 reads (its timeline "
             "keys: filename, mark_cycles)");
  EXPECT_HAS(MapError("network:\n  a: 1\n"),
             "'network.a' is not a setting Horovod 0.28 reads "
             "(no such section)");
  EXPECT_HAS(MapError("verbose: 1\n"), "c.yaml:1: 'verbose' is not a key or section");
  EXPECT_HAS(MapError("controller: nccl\n"), "controller 'nccl' is not one of gloo, mpi");
  EXPECT_HAS(MapError("params:\n  hierarchical_allreduce: maybe\n"),
             "c.yaml:2: 'params.hierarchical_allreduce' must be true or false, not 'maybe'");
}

// What PyYAML (Horovod's reader) accepts: a byte order mark, `section: ~` for a section without
// keys; and what it reads otherwise: y and n are strings, not booleans.
TEST(HorovodConfig, AsPyYamlReadsIt) {
  EXPECT_EQ(Flat(Map("\xEF\xBB\xBFparams:\n  cache_capacity: 8\n")),
            (std::vector<std::string>{"--cache-capacity=8@c.yaml:2"}));
  EXPECT_TRUE(Map("params: ~\nautotune: null\ntimeline: Null\ncontroller: ~\n").empty());
  EXPECT_EQ(Flat(Map("params: ~\nlogging:\n  level: info\n")),
            (std::vector<std::string>{"--log-level=info@c.yaml:3"}));
  EXPECT_HAS(MapError("params:\n  hierarchical_allreduce: y\n"), "must be true or false, not 'y'");
  EXPECT_HAS(MapError("params:\n  hierarchical_allreduce: n\n"), "must be true or false, not 'n'");
  EXPECT_HAS(MapError("params:\n  hierarchical_allreduce: tRUE\n"), "not 'tRUE'");
  for (const char* yes : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
    EXPECT_EQ(Map(std::string("params:\n  hierarchical_allreduce: ") + yes + "\n")[0].flag,
              "--hierarchical-allreduce")
        << yes;
  }
  EXPECT_HAS(MapError("nonsense: ~\n"), "'nonsense' is not a key or section");
  EXPECT_HAS(MapError("params: 5\n"), "c.yaml:1: 'params' is a section: write 'params:' alone");
  EXPECT_HAS(YamlError("params: ~\n  cache_capacity: 8\n"), "no 'section:' line opens it");
}

TEST(HorovodConfig, MissingFileNamesTheFlag) {
  Entries out;
  Status s = LoadHorovodConfig("/nonexistent/horovod.yaml", &out);
  EXPECT_EQ(s.message(), "--config-file /nonexistent/horovod.yaml: No such file or directory");
}

}  // namespace
}  // namespace hvd::cli
