// "Did you mean" for mistyped names: hvdrun's flags (control/flags.h) and subcommands
// (cli/main.cc). A user arriving from torchrun or horovodrun types `--np`, `-n`, `hvdrun stats`;
// naming the nearest real spelling saves them a trip to --help.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvd::control {

// Levenshtein distance (insertions, deletions, substitutions; each costs 1), case-sensitive.
int EditDistance(std::string_view a, std::string_view b);

// The candidate nearest `word` within `max_distance` edits (the first of equals); "" when none.
std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates,
                        int max_distance);

// The known flag an unknown one most likely meant, "" when none is close: the same name with
// other dashes ("--np" for "-np"), else the shortest flag it begins ("--timeline" for
// "--timeline-filename", "-n" for "-np"), else one within 2 edits that keeps a letter of it.
std::string NearestFlag(std::string_view unknown, const std::vector<std::string>& known);

}  // namespace hvd::control
