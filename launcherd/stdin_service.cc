#include "launcherd/stdin_service.h"

#include <thread>

#include "control/grpc_util.h"

namespace hvd::launcherd {
namespace {

// How often a call waiting on the relay checks whether the job ended or the peer went away.
constexpr std::chrono::milliseconds kStdinPoll{200};
// The most one StdinData message to an agent carries.
constexpr size_t kChunk = 64 << 10;

// Whether the job is over (or unknown): its input is no longer wanted.
bool JobEnded(JobManager* jobs, const std::string& id) {
  JobStatus status;
  return !jobs->Get(id, &status).ok() || control::IsTerminal(status.state);
}

// rank/attempt -1: the writer (hvdrun), who names no rank.
Status CheckJobTakesInput(JobManager* jobs, const std::string& id, int rank, int attempt) {
  JobStatus status;
  HVD_RETURN_IF_ERROR(jobs->Get(id, &status));
  if (status.spec.stdin_rank < 0) {
    return FailedPrecondition("job " + id +
                              " does not read hvdrun's standard input (submitted with --stdin "
                              "none, or by hvdrun submit)");
  }
  if (rank >= 0 && rank != status.spec.stdin_rank) {
    return FailedPrecondition("rank " + std::to_string(rank) + " of job " + id +
                              " does not read the job's standard input (rank " +
                              std::to_string(status.spec.stdin_rank) + " does)");
  }
  if (attempt >= 0 && attempt < status.attempt) {
    // A late call of a replaced attempt must not take the input meant for the current one.
    return Aborted("attempt " + std::to_string(attempt) + " of job " + id + " is over (attempt " +
                   std::to_string(status.attempt) + " runs)");
  }
  return Status::OK();
}

}  // namespace

grpc::Status ServeWriteStdin(JobManager* jobs, grpc::ServerContext* context,
                             grpc::ServerReader<v1::StdinData>* reader) {
  v1::StdinData m;
  if (!reader->Read(&m)) return grpc::Status::OK;  // nothing sent, not even the job
  const std::string id = m.job_id();
  Status s = CheckJobTakesInput(jobs, id, -1, -1);
  if (!s.ok()) return control::ToGrpc(s.WithContext("WriteStdin"));
  if (JobEnded(jobs, id)) return grpc::Status::OK;  // nothing will read it
  StdinRelay& relay = jobs->stdin_relay();
  relay.Prune([&](const std::string& job) { return job != id && JobEnded(jobs, job); });

  // False when the input is no longer wanted: the job ended (its input is dropped) or hvdrun went.
  const auto push = [&](const std::string& data) {
    while (true) {
      Status w = relay.Write(id, data, kStdinPoll);
      if (w.ok()) return true;
      if (w.code() != StatusCode::kDeadlineExceeded) return false;
      if (context->IsCancelled()) return false;
      if (JobEnded(jobs, id)) {
        relay.Drop(id);
        return false;
      }
    }
  };
  bool wanted = push(m.data());
  while (wanted && reader->Read(&m)) wanted = push(m.data());
  if (!wanted) {
    relay.Close(id);  // hvdrun went away mid-input: the rank reads what came, then EOF
    return grpc::Status::OK;
  }
  // The client's end of the stream (or its going away: the same for the rank) ends the input.
  relay.Close(id);
  // What is still buffered when the job ends is dropped here; until then hvdrun's Finish waits,
  // which costs it nothing (it also waits for the job).
  while (!relay.Drained(id) && !context->IsCancelled()) {
    if (JobEnded(jobs, id)) {
      relay.Drop(id);
      break;
    }
    std::this_thread::sleep_for(kStdinPoll);
  }
  return grpc::Status::OK;
}

grpc::Status ServeReadStdin(JobManager* jobs, grpc::ServerContext* context,
                            const v1::ReadStdinRequest& request,
                            grpc::ServerWriter<v1::StdinData>* writer) {
  const std::string& id = request.job_id();
  Status s = CheckJobTakesInput(jobs, id, request.rank(), request.attempt());
  if (!s.ok()) return control::ToGrpc(s.WithContext("ReadStdin"));
  StdinRelay& relay = jobs->stdin_relay();
  while (true) {
    std::string data;
    bool eof = false;
    Status r = relay.Read(id, request.attempt(), kChunk, kStdinPoll, &data, &eof);
    if (r.ok()) {
      if (!data.empty()) {
        v1::StdinData d;
        d.set_data(std::move(data));
        // Blocks while the agent does not read (its rank's pipe is full): gRPC's flow control.
        if (!writer->Write(d)) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "ReadStdin: the agent went away");
        }
      }
      if (eof) return grpc::Status::OK;
      continue;
    }
    if (r.code() == StatusCode::kAborted) return control::ToGrpc(r.WithContext("ReadStdin"));
    if (r.code() != StatusCode::kDeadlineExceeded) return grpc::Status::OK;  // dropped: EOF
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "ReadStdin: the agent went away");
    }
    if (JobEnded(jobs, id)) {
      relay.Drop(id);
      return grpc::Status::OK;
    }
  }
}

}  // namespace hvd::launcherd
