// Where a program named without a '/' is looked for along $PATH, as execvp(3) and a shell do it:
// hvd-agent's exec of a rank, hvdrun's check that the program exists, hvdrun's subcommand guess.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvd::base {

// "dir/name" for each entry of `path_var` (':'-separated), in order. An empty entry (leading,
// trailing or "::") is the current directory: `cwd` ("." when empty). No '/' is doubled after a
// directory that ends in one. REQUIRES: `name` holds no '/' (a path is run as it is).
std::vector<std::string> PathCandidates(std::string_view name, std::string_view path_var,
                                        std::string_view cwd = ".");

}  // namespace hvd::base
