#include "cli/ssh_session.h"

namespace hvd::cli {

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool HaveSshBootstrap() {
#if HVD_CLI_SSH && HVD_CLI_EMBEDDED
  return true;
#else
  return false;
#endif
}

}  // namespace hvd::cli

#if HVD_CLI_SSH
#include <libssh/libssh.h>

namespace hvd::cli {

struct SshSession::Impl {
  ssh_session session = nullptr;
  ssh_channel channel = nullptr;
  bool ended = false;
  bool have_exit_status = false;
  int exit_status = -1;

  ~Impl() {
    if (channel != nullptr) {
      ssh_channel_close(channel);
      ssh_channel_free(channel);
    }
    if (session != nullptr) {
      ssh_disconnect(session);
      ssh_free(session);
    }
  }
};

namespace {

std::string KnownHostsName(const std::string& host, int port) {
  return port == 22 ? host : "[" + host + "]:" + std::to_string(port);
}

// "ssh-ed25519 SHA256:..." of the server's key.
std::string ServerKey(ssh_session s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK) return "an unreadable key";
  unsigned char* hash = nullptr;
  size_t len = 0;
  std::string text = ssh_key_type_to_char(ssh_key_type(key));
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) == 0) {
    char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    if (fp != nullptr) {
      text += std::string(" ") + fp;
      ssh_string_free_char(fp);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return text;
}

Status CheckHostKey(ssh_session s, const SshTarget& t, const std::string& key) {
  const std::string file = t.known_hosts.empty() ? "~/.ssh/known_hosts" : t.known_hosts;
  const std::string name = KnownHostsName(t.host, t.port);
  switch (ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
      return Status::OK();
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      return FailedPrecondition(
          "host key: the server now shows " + key + ", which is NOT the key " + file +
          " records for " + name +
          ". Someone may be intercepting the connection, or the host was reinstalled. Check the "
          "key on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub); if it is right, "
          "drop the old one with: ssh-keygen -f " +
          file + " -R '" + name + "'");
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
      return FailedPrecondition(
          "host key: " + name + " is not in " + file + " (the server shows " + key +
          "); hvdrun never accepts a key by itself. Check the key on the host (ssh-keygen -lf "
          "/etc/ssh/ssh_host_ed25519_key.pub) and record it with: ssh-keyscan -p " +
          std::to_string(t.port) + " " + t.host + " >> " + file);
    default:
      return Unavailable(std::string("host key: cannot check it: ") + ssh_get_error(s));
  }
}

Status Authenticate(ssh_session s, const SshTarget& t, const std::string& user) {
  int rc;
  if (!t.identity.empty()) {
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(t.identity.c_str(), nullptr, nullptr, nullptr, &key) !=
        SSH_OK) {
      return InvalidArgument("authenticate: cannot read the private key " + t.identity +
                             " (missing, unreadable, or protected by a passphrase, which hvdrun "
                             "cannot ask for: load it into ssh-agent and leave out -i)");
    }
    rc = ssh_userauth_publickey(s, nullptr, key);
    ssh_key_free(key);
  } else {
    rc = ssh_userauth_publickey_auto(s, nullptr, nullptr);
  }
  if (rc == SSH_AUTH_SUCCESS) return Status::OK();
  const std::string keys = t.identity.empty() ? "the ssh-agent's and ~/.ssh's keys" : t.identity;
  if (rc == SSH_AUTH_DENIED) {
    return FailedPrecondition("authenticate: the server refused " + keys + " for user " + user +
                              " (is the public key in " + user + "'s authorized_keys on " + t.host +
                              "? pass the right one with -i)");
  }
  if (rc == SSH_AUTH_PARTIAL) {
    return FailedPrecondition("authenticate: the server wants more than a key for user " + user +
                              " (hvdrun --ssh authenticates with keys only)");
  }
  return Unavailable(std::string("authenticate: ") + ssh_get_error(s));
}

}  // namespace

Status SshSession::Connect(const SshTarget& t, std::unique_ptr<SshSession>* out) {
  std::unique_ptr<SshSession> me(new SshSession());
  me->impl_ = std::make_unique<Impl>();
  ssh_session s = me->impl_->session = ssh_new();
  std::string where = t.host + ":" + std::to_string(t.port);
  if (s == nullptr) return Internal("ssh " + where + ": ssh_new failed (out of memory?)");
  // ~/.ssh/config first (host aliases, users), then what the flags say on top of it.
  ssh_options_set(s, SSH_OPTIONS_HOST, t.host.c_str());
  ssh_options_parse_config(s, nullptr);
  const bool no = false;
  ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no);
  const int port = t.port;
  ssh_options_set(s, SSH_OPTIONS_PORT, &port);
  if (!t.user.empty()) ssh_options_set(s, SSH_OPTIONS_USER, t.user.c_str());
  if (!t.known_hosts.empty()) ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, t.known_hosts.c_str());
  const long timeout = static_cast<long>(t.timeout.count());
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeout);
  char* user = nullptr;
  std::string user_name = t.user;
  if (ssh_options_get(s, SSH_OPTIONS_USER, &user) == SSH_OK && user != nullptr) {
    user_name = user;
    ssh_string_free_char(user);
  }
  me->where_ = user_name + "@" + where;
  const std::string prefix = "ssh " + me->where_ + ": ";
  if (ssh_connect(s) != SSH_OK) {
    return Unavailable(prefix + "connect: " + ssh_get_error(s));
  }
  me->host_key_ = ServerKey(s);
  HVD_RETURN_IF_ERROR_CTX(CheckHostKey(s, t, me->host_key_), "ssh " + me->where_);
  HVD_RETURN_IF_ERROR_CTX(Authenticate(s, t, user_name), "ssh " + me->where_);
  *out = std::move(me);
  return Status::OK();
}

SshSession::~SshSession() = default;

Status SshSession::Exec(const std::string& command, const std::string& stdin_line) {
  Impl& m = *impl_;
  const std::string prefix = "ssh " + where_ + ": starting the remote command: ";
  m.channel = ssh_channel_new(m.session);
  if (m.channel == nullptr || ssh_channel_open_session(m.channel) != SSH_OK ||
      ssh_channel_request_exec(m.channel, command.c_str()) != SSH_OK) {
    return Unavailable(prefix + ssh_get_error(m.session));
  }
  const std::string line = stdin_line + "\n";
  if (ssh_channel_write(m.channel, line.data(), static_cast<uint32_t>(line.size())) !=
      static_cast<int>(line.size())) {
    return Unavailable(prefix + "writing its stdin: " + ssh_get_error(m.session));
  }
  return Status::OK();
}

bool SshSession::Read(std::chrono::milliseconds timeout, std::string* output) {
  Impl& m = *impl_;
  if (m.ended || m.channel == nullptr) return false;
  char buf[4096];
  // stderr (where hvd-agent logs) waits the timeout; stdout is then drained without waiting.
  for (int is_stderr : {1, 0}) {
    while (true) {
      const int n = ssh_channel_read_timeout(m.channel, buf, sizeof buf, is_stderr,
                                             is_stderr ? static_cast<int>(timeout.count()) : 0);
      if (n == SSH_ERROR) {
        m.ended = true;
        return false;
      }
      if (n <= 0) break;
      output->append(buf, static_cast<size_t>(n));
      if (is_stderr) break;  // then look at stdout too
    }
  }
  if (ssh_channel_poll(m.channel, 0) == SSH_EOF && ssh_channel_poll(m.channel, 1) == SSH_EOF) {
    m.ended = true;
  }
  return !m.ended;
}

void SshSession::CloseStdin() {
  if (impl_->channel != nullptr && !impl_->ended) ssh_channel_send_eof(impl_->channel);
}

int SshSession::exit_status() {
  Impl& m = *impl_;
  if (!m.have_exit_status && m.channel != nullptr) {
    m.exit_status = ssh_channel_get_exit_status(m.channel);  // bounded by the session timeout
    m.have_exit_status = true;
  }
  return m.exit_status;
}

}  // namespace hvd::cli

#endif  // HVD_CLI_SSH
