#include "control/flags.h"

#include <sstream>

#include "common/settings.h"

namespace hvd::control {

void FlagSet::Add(const char* names, Kind kind, void* target, const char* help) {
  Flag f{{}, kind, target, help};
  std::stringstream ss(names);
  std::string n;
  while (std::getline(ss, n, ',')) f.names.push_back(n);
  flags_.push_back(std::move(f));
}

void FlagSet::String(const char* n, std::string* t, const char* h) { Add(n, Kind::kString, t, h); }
void FlagSet::Int(const char* n, int64_t* t, const char* h) { Add(n, Kind::kInt, t, h); }
void FlagSet::Double(const char* n, double* t, const char* h) { Add(n, Kind::kDouble, t, h); }
void FlagSet::Bool(const char* n, bool* t, const char* h) { Add(n, Kind::kBool, t, h); }
void FlagSet::Repeated(const char* n, std::vector<std::string>* t, const char* h) {
  Add(n, Kind::kRepeated, t, h);
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

Status FlagSet::Set(Flag& f, const std::string& name, const std::string& value) {
  f.given = true;
  Status s;
  switch (f.kind) {
    case Kind::kString:
      *static_cast<std::string*>(f.target) = value;
      return Status::OK();
    case Kind::kRepeated:
      static_cast<std::vector<std::string>*>(f.target)->push_back(value);
      return Status::OK();
    case Kind::kInt:
      s = common::ParseInt64(value, static_cast<int64_t*>(f.target));
      break;
    case Kind::kDouble:
      s = common::ParseDouble(value, static_cast<double*>(f.target));
      break;
    case Kind::kBool:
      s = common::ParseBool(value, static_cast<bool*>(f.target));
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
      return InvalidArgument(program_ + ": unknown flag " + name + "; see " + program_ +
                             " --help");
    }
    if (f->kind == Kind::kBool && !has_value) {
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        return InvalidArgument(program_ + ": flag " + name + " needs a value (" + f->help + ")");
      }
      value = argv[++i];
    }
    HVD_RETURN_IF_ERROR(Set(*f, name, value));
  }
  return Status::OK();
}

std::string FlagSet::Usage(const std::string& synopsis) const {
  std::string out = "usage: " + program_ + " " + synopsis + "\n\nflags:\n";
  for (const Flag& f : flags_) {
    std::string names;
    for (const std::string& n : f.names) names += (names.empty() ? "" : ", ") + n;
    const char* arg = f.kind == Kind::kBool     ? ""
                      : f.kind == Kind::kInt    ? " N"
                      : f.kind == Kind::kDouble ? " X"
                                                : " VALUE";
    std::string left = "  " + names + arg;
    if (left.size() < 32) left.resize(32, ' ');
    out += left + " " + f.help + "\n";
  }
  return out;
}

}  // namespace hvd::control
