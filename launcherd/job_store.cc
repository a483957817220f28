#include "launcherd/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/mutex.h"
#include "base/logging.h"
#include "base/thread_annotations.h"
#include "launcherd/proto_convert.h"

namespace hvd::launcherd {
namespace {

// The schema's version, in SQLite's user_version: a newer launcher migrates, an older one refuses
// a database it does not understand instead of misreading it.
constexpr int kSchemaVersion = 1;

// jobs.db holds every job's secret and its -x values. SQLite creates the database 0644 (less the
// umask) but gives its -wal and -shm the database file's own mode, so the database is created
// here, 0600 whatever the umask, before SQLite opens it; files an older launcher left looser are
// tightened. O_NOFOLLOW: a symlink planted in a shared directory is refused, not followed.
Status CreatePrivate(const std::string& path, bool create) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    if (!create && errno == ENOENT) return Status::OK();
    return Unavailable("job store " + path + ": cannot open: " + std::strerror(errno) +
                       "; the --state-dir must be writable by this user, and jobs.db a file");
  }
  const bool ok = fchmod(fd, 0600) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return Unavailable("job store " + path + ": cannot make it private (chmod 0600): " +
                       std::strerror(err) + "; it must belong to the launcher's user");
  }
  return Status::OK();
}

// A state directory others can read or enter exposes nothing through jobs.db (0600), but it is
// where a careless copy or an older file would leak: said once, at start.
void WarnIfOthersCanRead(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || (st.st_mode & S_IRWXO) == 0) return;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  HVD_LOG(WARNING) << "--state-dir " << dir << " is open to other users (mode " << mode
                   << "); it holds the job table with every job's secret: chmod 700 " << dir;
}

class SqliteJobStore final : public JobStore {
 public:
  explicit SqliteJobStore(std::string path) : path_(std::move(path)) {}
  ~SqliteJobStore() override {
    for (sqlite3_stmt* s : {put_, remove_, load_}) sqlite3_finalize(s);
    if (db_ != nullptr) sqlite3_close(db_);
  }

  Status Init() {
    if (sqlite3_open_v2(path_.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
      return Error("open");
    }
    sqlite3_busy_timeout(db_, 5000);
    HVD_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    HVD_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
    int version = 0;
    {
      sqlite3_stmt* v = nullptr;
      if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &v, nullptr) != SQLITE_OK) {
        return Error("read the schema version");
      }
      if (sqlite3_step(v) == SQLITE_ROW) version = sqlite3_column_int(v, 0);
      sqlite3_finalize(v);
    }
    if (version > kSchemaVersion) {
      return FailedPrecondition(path_ + " was written by a newer hvd-launcherd (schema " +
                                std::to_string(version) + ", this one knows " +
                                std::to_string(kSchemaVersion) +
                                "); run that version, or move the file away to start empty");
    }
    HVD_RETURN_IF_ERROR(
        Exec("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, submit_ms INTEGER NOT NULL, "
             "record BLOB NOT NULL, secret TEXT NOT NULL, next_seq INTEGER NOT NULL)"));
    HVD_RETURN_IF_ERROR(Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion)));
    HVD_RETURN_IF_ERROR(Prepare("INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?)", &put_));
    HVD_RETURN_IF_ERROR(Prepare("DELETE FROM jobs WHERE id = ?", &remove_));
    HVD_RETURN_IF_ERROR(
        Prepare("SELECT record, secret, next_seq FROM jobs ORDER BY submit_ms, id", &load_));
    return Status::OK();
  }

  Status Put(const StoredJob& job) override { return PutMany({job}); }

  Status PutMany(const std::vector<StoredJob>& jobs) override {
    if (jobs.empty()) return Status::OK();
    // Serialized before the lock and the transaction: the SQLite part is only the row writes.
    std::vector<std::string> records(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      v1::JobStatus p;
      ToProto(jobs[i].status, &p);
      records[i] = p.SerializeAsString();
    }
    base::MutexLock lock(&mu_);
    // One transaction for the batch: one WAL commit instead of one per row.
    HVD_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    for (size_t i = 0; i < jobs.size(); ++i) {
      Status s = PutRowLocked(jobs[i], records[i]);
      if (!s.ok()) {
        (void)Exec("ROLLBACK");
        return s;
      }
    }
    Status s = Exec("COMMIT");
    if (!s.ok()) (void)Exec("ROLLBACK");
    return s;
  }

  Status Remove(const std::string& id) override {
    base::MutexLock lock(&mu_);
    sqlite3_reset(remove_);
    sqlite3_bind_text(remove_, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(remove_) != SQLITE_DONE) return Error("remove job " + id);
    return Status::OK();
  }

  Status LoadAll(std::vector<StoredJob>* out) override {
    base::MutexLock lock(&mu_);
    sqlite3_reset(load_);
    int rc;
    while ((rc = sqlite3_step(load_)) == SQLITE_ROW) {
      v1::JobStatus p;
      const void* blob = sqlite3_column_blob(load_, 0);
      const int n = sqlite3_column_bytes(load_, 0);
      if (!p.ParseFromArray(blob, n)) {
        return Internal(path_ +
                        ": a job record does not parse; move the file away to start "
                        "empty (its jobs are then forgotten)");
      }
      StoredJob job;
      job.status = FromProto(p);
      job.secret = reinterpret_cast<const char*>(sqlite3_column_text(load_, 1));
      job.next_seq = sqlite3_column_int64(load_, 2);
      out->push_back(std::move(job));
    }
    if (rc != SQLITE_DONE) return Error("read the jobs");
    return Status::OK();
  }

 private:
  // One row, inside PutMany's transaction.
  Status PutRowLocked(const StoredJob& job, const std::string& record) HVD_REQUIRES(mu_) {
    sqlite3_reset(put_);
    sqlite3_bind_text(put_, 1, job.status.id.data(), static_cast<int>(job.status.id.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(put_, 2, job.status.submit_time_ms);
    sqlite3_bind_blob(put_, 3, record.data(), static_cast<int>(record.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(put_, 4, job.secret.data(), static_cast<int>(job.secret.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(put_, 5, job.next_seq);
    const bool ok = sqlite3_step(put_) == SQLITE_DONE;
    sqlite3_reset(put_);  // done with it: nothing of it stays open when the batch commits
    return ok ? Status::OK() : Error("write job " + job.status.id);
  }

  Status Error(const std::string& what) {
    return Unavailable("job store " + path_ + ": cannot " + what + ": " +
                       (db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory"));
  }
  Status Exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err != nullptr ? err : "unknown error";
      sqlite3_free(err);
      return Unavailable("job store " + path_ + ": " + sql + ": " + msg);
    }
    return Status::OK();
  }
  Status Prepare(const char* sql, sqlite3_stmt** stmt) {
    if (sqlite3_prepare_v2(db_, sql, -1, stmt, nullptr) != SQLITE_OK) {
      return Error(std::string("prepare '") + sql + "'");
    }
    return Status::OK();
  }

  const std::string path_;
  sqlite3* db_ = nullptr;
  base::Mutex mu_;  // statements are reused: one use at a time
  sqlite3_stmt* put_ HVD_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* remove_ HVD_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* load_ HVD_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

Status JobStore::Open(const std::string& dir, std::unique_ptr<JobStore>* out) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return InvalidArgument("cannot create --state-dir " + dir + ": " + std::strerror(errno));
  }
  WarnIfOthersCanRead(dir);
  const std::string path = dir + "/jobs.db";
  HVD_RETURN_IF_ERROR(CreatePrivate(path, /*create=*/true));
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    HVD_RETURN_IF_ERROR(CreatePrivate(path + suffix, /*create=*/false));
  }
  auto store = std::make_unique<SqliteJobStore>(path);
  HVD_RETURN_IF_ERROR(store->Init());
  *out = std::move(store);
  return Status::OK();
}

}  // namespace hvd::launcherd
