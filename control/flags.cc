#include "control/flags.h"

#include <algorithm>
#include <sstream>

#include "base/settings.h"
#include "control/suggest.h"

namespace hvd::control {

void FlagSet::Add(const char* names, Kind kind, void* target, const char* help) {
  Flag f;
  f.kind = kind;
  f.target = target;
  f.help = help;
  f.group = group_;
  std::stringstream ss(names);
  std::string n;
  while (std::getline(ss, n, ',')) f.names.push_back(n);
  flags_.push_back(std::move(f));
}

void FlagSet::String(const char* n, std::string* t, const char* h) {
  Add(n, Kind::kString, t, h);
}
void FlagSet::Int(const char* n, int64_t* t, const char* h) {
  Add(n, Kind::kInt, t, h);
}
void FlagSet::Double(const char* n, double* t, const char* h) {
  Add(n, Kind::kDouble, t, h);
}
void FlagSet::Bool(const char* n, bool* t, const char* h) {
  Add(n, Kind::kBool, t, h);
}
void FlagSet::Repeated(const char* n, std::vector<std::string>* t, const char* h) {
  Add(n, Kind::kRepeated, t, h);
}

void FlagSet::StringList(const char* n, std::string* t, const char* h) {
  Add(n, Kind::kList, t, h);
}

void FlagSet::Pair(const char* n, std::string* t, const char* h) {
  Add(n, Kind::kPair, t, h);
}

void FlagSet::Refused(const char* names, const char* value, const char* message) {
  Add(names, Kind::kRefused, nullptr, message);
  flags_.back().metavar = value;
}

void FlagSet::Alias(const char* existing, const char* alias) {
  // A programming error, not a user's: the alias must name a registered flag.
  if (Flag* f = Find(existing)) f->names.push_back(alias);
}

void FlagSet::Group(const char* title) {
  group_ = title;
}

void FlagSet::ConfigFile(const char* names, std::string* path, ConfigLoader loader,
                         const char* help) {
  Add(names, Kind::kConfig, path, help);
  config_loader_ = std::move(loader);
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

bool FlagSet::Given(const char* long_name) const {
  for (const Flag& f : flags_) {
    if (f.names[0] == long_name) return f.given;
  }
  return false;
}

std::string FlagSet::GivenAs(const char* long_name) const {
  for (const Flag& f : flags_) {
    if (f.names[0] == long_name) return f.given ? f.given_as : "";
  }
  return "";
}

bool FlagSet::FromConfig(const char* long_name) const {
  for (const Flag& f : flags_) {
    if (f.names[0] == long_name) return f.given && f.from_config;
  }
  return false;
}

Status FlagSet::Set(Flag& f, const std::string& name, const std::string& value) {
  const bool again = f.given;
  f.given = true;
  f.given_as = name;
  Status s;
  switch (f.kind) {
    case Kind::kString:
    case Kind::kConfig:
    case Kind::kPair:
      *static_cast<std::string*>(f.target) = value;
      return Status::OK();
    case Kind::kList: {
      // Every value is kept: a second --network-interface adds to the first, as horovodrun's.
      auto* t = static_cast<std::string*>(f.target);
      *t = again && !t->empty() ? *t + "," + value : value;
      return Status::OK();
    }
    case Kind::kRefused:
      return InvalidArgument(program_ + ": " + name + ": " + f.help);
    case Kind::kRepeated:
      static_cast<std::vector<std::string>*>(f.target)->push_back(value);
      return Status::OK();
    case Kind::kInt:
      s = base::ParseInt64(value, static_cast<int64_t*>(f.target));
      break;
    case Kind::kDouble:
      s = base::ParseDouble(value, static_cast<double*>(f.target));
      break;
    case Kind::kBool:
      s = base::ParseBool(value, static_cast<bool*>(f.target));
      break;
  }
  if (!s.ok()) return InvalidArgument(program_ + ": flag " + name + ": " + s.message());
  return Status::OK();
}

Status FlagSet::Parse(int argc, char** argv, int first, bool stop_at_positional,
                      std::vector<std::string>* positional) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional->push_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional->push_back(arg);
      if (stop_at_positional) {
        for (++i; i < argc; ++i) positional->push_back(argv[i]);
        break;
      }
      continue;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr) {
      std::vector<std::string> known;  // what a typo may have meant (refused flags: no use)
      for (const Flag& k : flags_) {
        if (k.kind != Kind::kRefused) known.insert(known.end(), k.names.begin(), k.names.end());
      }
      const std::string near = NearestFlag(name, known);
      return InvalidArgument(program_ + ": unknown flag " + name +
                             (near.empty() ? "; see " : "; did you mean " + near + "? (see ") +
                             program_ + " --help" + (near.empty() ? "" : ")"));
    }
    if (f->kind == Kind::kRefused) return Set(*f, name, value);
    if (f->kind == Kind::kBool && !has_value) {
      value = "true";
    } else if (f->kind == Kind::kPair && !has_value) {
      if (i + 2 >= argc) {
        return InvalidArgument(program_ + ": flag " + name + " needs two values (" + f->help + ")");
      }
      value = std::string(argv[i + 1]) + "," + argv[i + 2];
      i += 2;
    } else if (!has_value) {
      if (i + 1 >= argc) {
        return InvalidArgument(program_ + ": flag " + name + " needs a value (" + f->help + ")");
      }
      value = argv[++i];
    }
    HVD_RETURN_IF_ERROR(Set(*f, name, value));
  }
  return ApplyConfig();
}

Status FlagSet::ApplyConfig() {
  const Flag* config = nullptr;
  for (const Flag& f : flags_) {
    if (f.kind == Kind::kConfig && f.given) config = &f;
  }
  if (config == nullptr || !config_loader_) return Status::OK();
  const std::string path = *static_cast<const std::string*>(config->target);
  std::vector<ConfigEntry> entries;
  HVD_RETURN_IF_ERROR(config_loader_(path, &entries));
  // Decided before any entry is applied, so that entries never override each other by order.
  std::vector<bool> skip(entries.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const ConfigEntry& e = entries[i];
    Flag* f = Find(e.flag);
    if (f == nullptr) {
      return InvalidArgument(program_ + ": " + e.where + ": " + e.flag + " is not a flag of " +
                             program_);
    }
    skip[i] = f->given;
    for (const std::string& other : e.overridden_by) {
      if (const Flag* o = Find(other); o != nullptr && o->given) skip[i] = true;
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (skip[i]) continue;
    const ConfigEntry& e = entries[i];
    Flag* f = Find(e.flag);
    Status s = Set(*f, e.flag, e.value);
    if (!s.ok()) {
      std::string m = s.message();
      if (m.rfind(program_ + ": ", 0) == 0) m.erase(0, program_.size() + 2);
      return InvalidArgument(program_ + ": " + e.where + ": " + m);
    }
    f->given_as = e.where + " (" + e.flag + ")";
    f->from_config = true;
  }
  return Status::OK();
}

std::string FlagSet::Usage(const std::string& synopsis) const {
  std::string out = "usage: " + program_ + " " + synopsis + "\n\nflags:\n";
  // Ungrouped flags first, then each group in the order it was started.
  std::vector<std::string> groups = {""};
  for (const Flag& f : flags_) {
    if (std::find(groups.begin(), groups.end(), f.group) == groups.end()) groups.push_back(f.group);
  }
  for (const std::string& group : groups) {
    if (!group.empty()) out += "\n" + group + ":\n";
    for (const Flag& f : flags_) {
      if (f.group != group) continue;
      std::string names;
      for (const std::string& n : f.names) names += (names.empty() ? "" : ", ") + n;
      const std::string arg = f.kind == Kind::kBool     ? ""
                              : f.kind == Kind::kInt    ? " N"
                              : f.kind == Kind::kDouble ? " X"
                              : f.kind == Kind::kPair   ? " A B"
                              : f.kind == Kind::kRefused
                                  ? (f.metavar.empty() ? "" : " " + f.metavar)
                                  : " VALUE";
      std::string left = "  " + names + arg;
      if (left.size() < 32) left.resize(32, ' ');
      out += left + " " + (f.kind == Kind::kRefused ? "not in hvd: " : "") + f.help + "\n";
    }
  }
  return out;
}

}  // namespace hvd::control
