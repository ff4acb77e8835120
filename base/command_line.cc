#include "base/command_line.h"

#include <algorithm>
#include <stdexcept>

namespace abox::base {

namespace {
void check_declared(const ParsedArgs& a, std::string_view name) {
  if (std::find(a.declared.begin(), a.declared.end(), name) == a.declared.end())
    throw std::logic_error("option --" + std::string(name) + " is read but not declared");
}
}  // namespace

bool ParsedArgs::has(std::string_view name) const {
  check_declared(*this, name);
  return std::any_of(options.begin(), options.end(), [&](const ParsedOption& o) { return o.name == name; });
}

std::optional<std::string> ParsedArgs::last(std::string_view name) const {
  check_declared(*this, name);
  for (auto it = options.rbegin(); it != options.rend(); ++it) {
    if (it->name == name) return it->value;
  }
  return std::nullopt;
}

std::vector<std::string> ParsedArgs::all(std::string_view name) const {
  check_declared(*this, name);
  std::vector<std::string> out;
  for (const auto& o : options) {
    if (o.name == name) out.push_back(o.value);
  }
  return out;
}

Result<ParsedArgs, std::string> parse_options(std::span<const std::string_view> args,
                                              std::span<const OptionSpec> specs, bool stop_at_positional) {
  ParsedArgs out;
  for (const auto& spec : specs) out.declared.push_back(spec.name);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--") {
      out.dash_dash = true;
      for (++i; i < args.size(); ++i) out.positionals.emplace_back(args[i]);
      break;
    }
    if (a == "-h" || a == "--help") {
      out.help = true;
      return out;
    }
    if (a.size() < 2 || a[0] != '-' || a == "-") {
      if (stop_at_positional) {
        for (; i < args.size(); ++i) out.positionals.emplace_back(args[i]);
        break;
      }
      out.positionals.emplace_back(a);
      continue;
    }
    const OptionSpec* spec = nullptr;
    std::optional<std::string> inline_value;
    std::string shown;
    if (a.starts_with("--")) {
      std::string_view body = a.substr(2);
      auto eq = body.find('=');
      std::string_view name = body.substr(0, eq);
      if (eq != std::string_view::npos) inline_value = std::string(body.substr(eq + 1));
      auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
      if (it != specs.end()) spec = &*it;
      shown = "--" + std::string(name);
    } else {
      // A short flag: -x, -xVALUE for one that takes a value.
      char c = a[1];
      auto it =
          std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.short_name == c; });
      if (it != specs.end()) spec = &*it;
      shown = std::string("-") + c;
      if (a.size() > 2) {
        if (spec != nullptr && spec->takes_value) {
          inline_value = std::string(a.substr(2));
        } else {
          return Err{"unknown option '" + std::string(a) + "'"};
        }
      }
    }
    if (spec == nullptr) return Err{"unknown option '" + shown + "'"};
    if (!spec->takes_value) {
      if (inline_value) return Err{shown + " takes no value"};
      out.options.push_back({spec->name, ""});
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Err{shown + " needs a value"};
      inline_value = std::string(args[++i]);
    }
    out.options.push_back({spec->name, std::move(*inline_value)});
  }
  return out;
}

base::Result<ParsedArgs, int> start_command(std::string_view command, std::string_view usage,
                                            std::span<const std::string_view> args,
                                            std::span<const OptionSpec> specs, std::ostream& out,
                                            std::ostream& err) {
  auto parsed = parse_options(args, specs, false);
  if (!parsed.ok()) {
    err << usage_error_line(command, parsed.error());
    return base::Err{2};
  }
  if (parsed->help) {
    out << usage;
    return base::Err{0};
  }
  return std::move(*parsed);
}

std::string usage_error_line(std::string_view command, std::string_view message) {
  std::string line;
  line.append(command).append(": ").append(message);
  line.append(" (see '").append(command).append(" --help')\n");
  return line;
}

}  // namespace abox::base
