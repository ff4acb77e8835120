#include "engine/cli/credentials_command.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <vector>

#include "base/json.h"
#include "base/unique_fd.h"
#include "broker/credential_file.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/options.h"
#include "engine/daemon/daemon_client.h"
#include "engine/daemon/instance_files.h"
#include "engine/instance/state_folder.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

using broker::CredentialFile;

constexpr std::string_view kUsage =
    "usage: abox credentials set NAME [--store FILE]      (the key on stdin)\n"
    "       abox credentials ls [--json] [--policy FILE]... [--store FILE]\n"
    "       abox credentials rm NAME... [--store FILE]\n"
    "\n"
    "The credential store: the real provider keys, one file (mode 0600, yours),\n"
    "from which each instance's broker gets the keys its policy's [[broker]]\n"
    "bindings name. A key never goes into the guest, argv, or any output.\n"
    "\n"
    "  set NAME   store the key read from stdin under NAME (replacing one there):\n"
    "             on a terminal it is asked for without echo; from a pipe or\n"
    "             file, all of it (one final newline dropped). 1-4096 visible\n"
    "             ASCII characters other than '*'. Never on the command line.\n"
    "  ls         the names (never the keys), and the [[broker]] bindings that\n"
    "             use each: the policy each of your instances runs (its state\n"
    "             folder's copy; its state from the daemon when it runs, else as\n"
    "             last recorded) and each --policy FILE; a name bound but not\n"
    "             stored is MISSING\n"
    "  rm NAME... remove names (all or none)\n"
    "\n"
    "Options:\n"
    "  --store FILE    the store (default: $ABOX_CREDENTIALS, else\n"
    "                  $XDG_CONFIG_HOME/abox/credentials.toml, else\n"
    "                  ~/.config/abox/credentials.toml)\n"
    "  --policy FILE   ls: also the bindings of this policy (repeatable)\n"
    "  --json          ls: {\"store\",\"credentials\":[{\"name\",\"stored\",\"bindings\":\n"
    "                  [{\"source\",\"policy\",\"instance\",\"state\",\"binding\"}]}],\n"
    "                  \"states\":\"daemon\"|\"records\",\"skipped\":[...]}\n"
    "\n"
    "Exit status: 0 done, 1 rm of a name that is not stored, 2 usage error,\n"
    "3 the store cannot be read or written (wrong owner or mode, a symlink, ...).\n";

constexpr OptionSpec kSpecs[] = {
    {"store", 0, true},
    {"policy", 0, true},
    {"json", 0, false},
};

int usage_error(std::ostream& err, const std::string& message) {
  err << "abox credentials: " << message << " (see 'abox credentials --help')\n";
  return kExitUsage;
}

int failed(std::ostream& err, const std::string& message) {
  err << "abox credentials: " << message << '\n';
  return kExitFailed;
}

// The folder of path, made (0700, with its missing parents) when absent.
base::Result<std::string, std::string> store_folder(const std::string& path, bool make) {
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (!make) return folder;
  for (std::size_t at = 1; at <= folder.size(); ++at) {
    if (at != folder.size() && folder[at] != '/') continue;
    const std::string prefix = folder.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return base::Err{prefix + ": " + std::strerror(errno)};
    }
  }
  return folder;
}

// An exclusive flock on the store's folder for one read-change-write.
base::Result<base::UniqueFd, std::string> lock_folder(const std::string& folder) {
  base::UniqueFd fd(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return base::Err{folder + ": " + std::strerror(errno)};
  int rc;
  do {
    rc = ::flock(fd.get(), LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return base::Err{"locking " + folder + ": " + std::strerror(errno)};
  return fd;
}

// The store, or an empty one when the file does not exist yet.
base::Result<CredentialFile, std::string> read_store(const std::string& path) {
  auto file = CredentialFile::read(path);
  if (file.ok()) return std::move(*file);
  if (file.error().missing) return CredentialFile{};
  return base::Err{file.error().message};
}

// Echo off on a terminal, back on when this goes.
class NoEcho {
 public:
  explicit NoEcho(int fd) : fd_(fd) {
    if (::tcgetattr(fd_, &saved_) != 0) return;
    termios quiet = saved_;
    // ISIG off too: Ctrl-C arrives as a character (and cancels) instead of
    // killing abox with the terminal's echo still off.
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO | ISIG);
    quiet.c_lflag |= ICANON;
    active_ = ::tcsetattr(fd_, TCSAFLUSH, &quiet) == 0;
  }
  ~NoEcho() {
    if (active_) ::tcsetattr(fd_, TCSAFLUSH, &saved_);
  }
  NoEcho(const NoEcho&) = delete;
  NoEcho& operator=(const NoEcho&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool active_ = false;
};

// The key from in_fd (see the header). The error never holds the key.
base::Result<std::string, std::string> read_key(int in_fd, std::string_view name, std::ostream& err) {
  const bool terminal = ::isatty(in_fd) == 1;
  std::string key;
  std::optional<NoEcho> no_echo;
  if (terminal) {
    err << "Key for " << name << " (not shown): " << std::flush;
    no_echo.emplace(in_fd);
  }
  char buf[1024];
  while (key.size() <= broker::kMaxCredentialKey + 2) {
    ssize_t n = ::read(in_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      broker::wipe(key);
      return base::Err{std::string("reading the key: ") + std::strerror(errno)};
    }
    if (n == 0) break;
    key.append(buf, static_cast<std::size_t>(n));
    if (terminal && key.back() == '\n') break;  // one line
  }
  std::memset(buf, 0, sizeof(buf));
  if (terminal) {
    no_echo.reset();
    err << '\n';
  }
  if (terminal && key.find('\x03') != std::string::npos) {
    broker::wipe(key);
    return base::Err{std::string("cancelled: nothing was stored")};
  }
  if (key.size() > broker::kMaxCredentialKey + 2) {
    broker::wipe(key);
    return base::Err{"the key is longer than " + std::to_string(broker::kMaxCredentialKey) + " bytes"};
  }
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (!key.empty() && key.back() == '\r') key.pop_back();
  if (key.empty()) return base::Err{std::string("no key on stdin: nothing was stored")};
  return key;
}

int set(const ParsedArgs& a, const std::string& store, int in_fd, std::ostream& out, std::ostream& err) {
  if (a.positionals.empty()) return usage_error(err, "set needs a NAME");
  if (a.positionals.size() > 1) {
    return usage_error(err,
                       "set takes one NAME: the key is read from stdin, never from the command line "
                       "(where your shell history and ps would show it)");
  }
  const std::string& name = a.positionals[0];
  if (!policy::valid_credential_name(name)) {
    return usage_error(err, "the name '" + name + "' is not 1 to 128 letters, digits, '-', '_' or '.'");
  }
  auto key = read_key(in_fd, name, err);
  if (!key.ok()) {
    err << "abox credentials: " << key.error() << '\n';
    return kExitNo;
  }
  struct Wiper {
    std::string& s;
    ~Wiper() { broker::wipe(s); }
  } wiper{*key};
  auto folder = store_folder(store, true);
  if (!folder.ok()) return failed(err, folder.error());
  auto lock = lock_folder(*folder);
  if (!lock.ok()) return failed(err, lock.error());
  auto file = read_store(store);
  if (!file.ok()) return failed(err, file.error());
  const bool replaced = file->find(name) != nullptr;
  if (auto s = file->set(name, *key); !s.ok()) {
    err << "abox credentials: " << s.error() << ": nothing was stored\n";
    return kExitNo;
  }
  if (auto w = file->write(store); !w.ok()) return failed(err, w.error());
  out << (replaced ? "replaced " : "stored ") << name << " in " << store << '\n';
  return kExitOk;
}

int remove(const ParsedArgs& a, const std::string& store, std::ostream& out, std::ostream& err) {
  if (a.positionals.empty()) return usage_error(err, "rm needs at least one NAME");
  auto folder = store_folder(store, false);
  if (!folder.ok()) return failed(err, folder.error());
  auto existing = CredentialFile::read(store);
  if (!existing.ok() && existing.error().missing) {
    err << "abox credentials: " << store << " does not exist: nothing to remove\n";
    return kExitNo;
  }
  auto lock = lock_folder(*folder);
  if (!lock.ok()) return failed(err, lock.error());
  auto file = read_store(store);
  if (!file.ok()) return failed(err, file.error());
  for (const auto& name : a.positionals) {
    if (file->find(name) == nullptr) {
      err << "abox credentials: no credential '" << name << "' in " << store << ": nothing was removed\n";
      return kExitNo;
    }
  }
  for (const auto& name : a.positionals) file->remove(name);
  if (auto w = file->write(store); !w.ok()) return failed(err, w.error());
  for (const auto& name : a.positionals) out << "removed " << name << '\n';
  return kExitOk;
}

struct Binding {
  std::string source;    // "instance" or "policy"
  std::string policy;    // the policy file
  std::string instance;  // for "instance"
  std::string state;     // for "instance": its state (api.md's names), "" when unknown
  std::string binding;   // "NAME:PORT"
};

// The instances' states. From the daemon's own answer (`ls` with all) when
// a daemon answers, so a detached instance whose shim died reads "failed"
// as `abox ls` says; else from each folder's instance.json as last written.
// Never starts a daemon; a daemon that does not answer within 3 s counts as
// none.
struct InstanceStates {
  std::map<std::string, std::string> by_name;
  bool from_daemon = false;
};

InstanceStates instance_states(const std::string& root, const std::vector<std::string>& names) {
  InstanceStates out;
  std::ostringstream quiet;
  if (auto client = DaemonClient::connect(/*autostart=*/false, quiet); client.ok()) {
    timeval tv{3, 0};
    ::setsockopt(client->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (auto reply = client->call("ls", boost::json::object{{"all", true}}); reply.ok()) {
      if (auto* list = reply->if_contains("instances"); list != nullptr && list->is_array()) {
        for (const auto& v : list->get_array()) {
          if (!v.is_object()) continue;
          const auto* n = v.get_object().if_contains("name");
          const auto* st = v.get_object().if_contains("state");
          if (n != nullptr && n->is_string() && st != nullptr && st->is_string())
            out.by_name[std::string(n->get_string())] = std::string(st->get_string());
        }
        out.from_daemon = true;
        return out;
      }
    }
  }
  for (const auto& n : names) {
    auto record = read_json_object(root + "/" + n + "/instance.json");
    if (!record.ok()) continue;
    if (const auto* st = record->if_contains("state"); st != nullptr && st->is_string())
      out.by_name[n] = std::string(st->get_string());
  }
  return out;
}

// Each policy's bindings by credential name: the policy each instance runs
// (its state folder's copy, policy.toml) and each --policy file. The files
// that could not be read go to skipped. Only names and bindings are read:
// a policy holds no key.
bool collect_bindings(const std::vector<std::string>& policy_files,
                      std::map<std::string, std::vector<Binding>>& out, std::vector<std::string>& skipped) {
  auto add = [&](const std::string& file, const std::string& instance, const std::string& state) {
    auto p = policy::load_policy(file);
    if (!p.ok()) {
      skipped.push_back(file + ": " + p.error().to_string());
      return;
    }
    for (const auto& b : p->brokers()) {
      out[b.credential].push_back(Binding{instance.empty() ? "policy" : "instance", file, instance, state,
                                          b.name + ":" + std::to_string(b.port)});
    }
  };
  bool from_daemon = false;
  if (auto root = default_instances_root(); root.ok()) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(root->c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (valid_instance_name(e->d_name)) names.emplace_back(e->d_name);
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    std::erase_if(names, [&](const std::string& n) {
      return ::access((*root + "/" + n + "/policy.toml").c_str(), F_OK) != 0;
    });
    if (!names.empty()) {
      auto states = instance_states(*root, names);
      from_daemon = states.from_daemon;
      for (const auto& n : names) {
        auto st = states.by_name.find(n);
        add(*root + "/" + n + "/policy.toml", n, st == states.by_name.end() ? std::string() : st->second);
      }
    }
  }
  for (const auto& f : policy_files) add(f, "", "");
  return from_daemon;
}

int list(const ParsedArgs& a, const std::string& store, std::ostream& out, std::ostream& err) {
  if (!a.positionals.empty()) return usage_error(err, "ls takes no NAME");
  auto file = read_store(store);
  if (!file.ok()) return failed(err, file.error());
  std::map<std::string, std::vector<Binding>> bindings;
  std::vector<std::string> skipped;
  const bool states_from_daemon = collect_bindings(a.all("policy"), bindings, skipped);
  std::map<std::string, bool> names;  // name -> stored
  for (const auto& [name, key] : file->entries()) names[name] = true;
  for (const auto& [name, b] : bindings) names.emplace(name, false);

  if (a.has("json")) {
    std::string text;
    base::JsonWriter w(text);
    w.begin_object().field("store", store).key("credentials").begin_array();
    for (const auto& [name, stored] : names) {
      w.begin_object().field("name", name).field("stored", stored).key("bindings").begin_array();
      for (const auto& b : bindings[name]) {
        w.begin_object().field("source", b.source).field("policy", b.policy);
        if (!b.instance.empty()) w.field("instance", b.instance);
        if (!b.state.empty()) w.field("state", b.state);
        w.field("binding", b.binding).end_object();
      }
      w.end_array().end_object();
    }
    w.end_array().field("states", states_from_daemon ? "daemon" : "records").key("skipped").begin_array();
    for (const auto& s : skipped) w.value(s);
    w.end_array().end_object();
    out << text << '\n';
    return kExitOk;
  }
  for (const auto& s : skipped) err << "abox credentials: skipped " << s << '\n';
  if (names.empty()) {
    out << "no credentials in " << store << '\n';
    return kExitOk;
  }
  std::size_t width = 4;
  for (const auto& [name, stored] : names) width = std::max(width, name.size());
  auto pad = [&](const std::string& s) { return s + std::string(width + 2 - s.size(), ' '); };
  out << pad("NAME") << "STATUS   BOUND BY\n";
  for (const auto& [name, stored] : names) {
    std::string by;
    for (const auto& b : bindings[name]) {
      if (!by.empty()) by += ", ";
      by += b.instance.empty() ? "policy " + b.policy
                               : "instance " + b.instance + (b.state.empty() ? "" : " [" + b.state + "]");
      by += " (" + b.binding + ")";
    }
    out << pad(name) << (stored ? "stored   " : "MISSING  ") << (by.empty() ? "-" : by) << '\n';
  }
  return kExitOk;
}

}  // namespace

base::Result<std::string, std::string> default_credentials_path() {
  if (const char* env = std::getenv("ABOX_CREDENTIALS"); env != nullptr && env[0] != '\0')
    return std::string(env);
  const char* config = std::getenv("XDG_CONFIG_HOME");
  if (config != nullptr && config[0] == '/') return std::string(config) + "/abox/credentials.toml";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.config/abox/credentials.toml";
  return base::Err{std::string("neither XDG_CONFIG_HOME nor HOME is set: give --store FILE")};
}

int run_credentials_command(std::span<const std::string_view> args, int in_fd, std::ostream& out,
                            std::ostream& err) {
  if (args.empty()) {
    err << kUsage;
    return kExitUsage;
  }
  if (is_help_flag(args[0])) {
    out << kUsage;
    return kExitOk;
  }
  const std::string_view verb = args[0];
  if (verb != "set" && verb != "ls" && verb != "rm") {
    return usage_error(err, "unknown command '" + std::string(verb) + "'");
  }
  auto parsed = parse_options(args.subspan(1), kSpecs, false);
  if (!parsed.ok()) return usage_error(err, parsed.error());
  if (parsed->help) {
    out << kUsage;
    return kExitOk;
  }
  if (verb != "ls" && (parsed->has("json") || parsed->has("policy"))) {
    return usage_error(err, "--json and --policy are options of ls");
  }
  std::string store;
  if (auto s = parsed->last("store")) {
    store = *s;
  } else {
    auto d = default_credentials_path();
    if (!d.ok()) return usage_error(err, d.error());
    store = *d;
  }
  if (store.empty()) return usage_error(err, "--store needs a file");
  if (verb == "set") return set(*parsed, store, in_fd, out, err);
  if (verb == "rm") return remove(*parsed, store, out, err);
  return list(*parsed, store, out, err);
}

}  // namespace abox::engine
