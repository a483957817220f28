// horovodrun's --config-file YAML subset (cli/config_file.h): the input is the file's contents.
// Properties: no crash; every scalar parsed names a line of the file; mapping the scalars to
// hvdrun flags either succeeds or fails with an error naming the file.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/config_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<hvd::cli::YamlScalar> scalars;
  const hvd::Status s = hvd::cli::ParseSimpleYaml(text, "fuzz.yaml", &scalars);
  if (!s.ok()) {
    HVD_FUZZ_CHECK(s.message().find("fuzz.yaml") != std::string::npos,
                   "an error without the file's name: " + s.message());
    return 0;
  }
  // Lines as any of "\n", "\r\n" or a lone "\r" end them: an upper bound.
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n') +
                                     std::count(text.begin(), text.end(), '\r')) + 1;
  for (const hvd::cli::YamlScalar& y : scalars) {
    HVD_FUZZ_CHECK(y.line >= 1 && y.line <= lines,
                   "scalar " + y.section + "." + y.key + " on line " + std::to_string(y.line));
  }
  std::vector<hvd::control::FlagSet::ConfigEntry> entries;
  const hvd::Status m = hvd::cli::HorovodConfigEntries(scalars, "fuzz.yaml", &entries);
  if (!m.ok()) {
    HVD_FUZZ_CHECK(m.message().find("fuzz.yaml") != std::string::npos,
                   "an error without the file's name: " + m.message());
  }
  return 0;
}
