// Command-line flags for hvd-launcherd, hvd-agent and hvdrun: "--name VALUE", "--name=VALUE",
// single-dash aliases ("-np 4", "-H a:2"), booleans ("--verbose", "--verbose=false") and repeated
// flags ("-x A -x B"). Unknown flags and malformed values are errors that name the flag and what
// it accepts; nothing is silently ignored. Flags another tool has and this one deliberately lacks
// are registered as refused, so their error says what to use instead; a config file flag
// (horovodrun's --config-file) sets flags the command line did not.
#pragma once

#include <cstdint>
#include <functional>
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
  // A string that may be given several times: the values are joined with ',' in order
  // ("--network-interface a --network-interface b,c" is "a,b,c").
  void StringList(const char* names, std::string* target, const char* help);
  // Two values, as argparse's nargs=2 ("--blacklist-cooldown-range 10 100", or "=10,100"):
  // *target gets them joined with ','.
  void Pair(const char* names, std::string* target, const char* help);
  // A flag this program does not have: giving it is an error "NAME: <message>", where the message
  // says what to do instead. `value` is the metavariable --help shows ("" for a switch).
  void Refused(const char* names, const char* value, const char* message);
  // Adds `alias` as another name of the flag already registered as `existing`.
  void Alias(const char* existing, const char* alias);
  // Starts a titled section of --help; flags registered after it are listed under it.
  void Group(const char* title);

  // One flag setting read from a config file; `where` ("file:line") prefixes its errors. It is
  // skipped when the command line gave `flag` or any of `overridden_by` (the command line wins,
  // as with horovodrun's --config-file).
  struct ConfigEntry {
    std::string flag;
    std::string value;
    std::string where;
    std::vector<std::string> overridden_by;
  };
  using ConfigLoader = std::function<Status(const std::string& path, std::vector<ConfigEntry>*)>;
  // A flag naming a config file: once the command line is parsed, `loader` reads the file and
  // its entries set the flags the command line did not give.
  void ConfigFile(const char* names, std::string* path, ConfigLoader loader, const char* help);

  // Parses argv[first..argc). Non-flag arguments go to *positional. With stop_at_positional, the
  // first non-flag argument and everything after it are positional (a program and its own flags,
  // as in `hvdrun -np 4 ./train --lr 0.1`); "--" always ends the flags.
  Status Parse(int argc, char** argv, int first, bool stop_at_positional,
               std::vector<std::string>* positional);

  // Whether the flag was given on the command line (or set from the config file).
  bool Given(const char* long_name) const;
  // The name the user typed for the flag (an alias, or "file:line" for a config file's), "" when
  // not given: errors name what the user wrote.
  std::string GivenAs(const char* long_name) const;
  // Whether the flag's value came from the config file rather than the command line: a setting
  // the command line makes otherwise (-x VAR, a contradicting flag) wins over it silently.
  bool FromConfig(const char* long_name) const;

  // "usage: <program> ..." with one line per flag.
  std::string Usage(const std::string& synopsis) const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated, kList, kPair, kRefused, kConfig };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* target;
    std::string help;
    bool given = false;
    bool from_config = false;
    std::string given_as;
    std::string group;    // --help section title, "" for the first
    std::string metavar;  // kRefused: what --help shows after the name
  };
  void Add(const char* names, Kind kind, void* target, const char* help);
  Flag* Find(const std::string& name);
  Status Set(Flag& f, const std::string& name, const std::string& value);
  Status ApplyConfig();

  std::string program_;
  std::vector<Flag> flags_;
  std::string group_;
  ConfigLoader config_loader_;
};

}  // namespace hvd::control
