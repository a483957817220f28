// Command-line flags for hvd-launcherd, hvd-agent and hvdrun: "--name VALUE", "--name=VALUE",
// single-dash aliases ("-np 4", "-H a:2"), booleans ("--verbose", "--verbose=false") and repeated
// flags ("-x A -x B"). Unknown flags and malformed values are errors that name the flag and what
// it accepts; nothing is silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::control {

class FlagSet {
 public:
  explicit FlagSet(std::string program) : program_(std::move(program)) {}
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // `names` is "--long" or "--long,-short" (e.g. "--np,-np"). Targets keep their value as the
  // default when the flag is absent.
  void String(const char* names, std::string* target, const char* help);
  void Int(const char* names, int64_t* target, const char* help);
  void Double(const char* names, double* target, const char* help);
  void Bool(const char* names, bool* target, const char* help);
  void Repeated(const char* names, std::vector<std::string>* target, const char* help);

  // Parses argv[first..argc). Non-flag arguments go to *positional. With stop_at_positional, the
  // first non-flag argument and everything after it are positional (a program and its own flags,
  // as in `hvdrun -np 4 ./train --lr 0.1`); "--" always ends the flags.
  Status Parse(int argc, char** argv, int first, bool stop_at_positional,
               std::vector<std::string>* positional);

  // Whether the flag was given on the command line.
  bool Given(const char* long_name) const;

  // "usage: <program> ..." with one line per flag.
  std::string Usage(const std::string& synopsis) const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* target;
    std::string help;
    bool given = false;
  };
  void Add(const char* names, Kind kind, void* target, const char* help);
  Flag* Find(const std::string& name);
  Status Set(Flag& f, const std::string& name, const std::string& value);

  std::string program_;
  std::vector<Flag> flags_;
};

}  // namespace hvd::control
