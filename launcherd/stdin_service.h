// The two doors of StdinRelay (stdin_relay.h): Launcher.WriteStdin, through which hvdrun sends its
// standard input, and AgentGateway.ReadStdin, through which the agent of the job's stdin rank
// reads it. The services delegate to these after checking the token. Both end when the job ends
// (checked every kStdinPoll), so a rank that never reads cannot hold hvdrun or a gRPC thread past
// the job.
#pragma once

#include <grpcpp/grpcpp.h>

#include "hvd/v1/agent.grpc.pb.h"
#include "hvd/v1/launcher.grpc.pb.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {

// Reads hvdrun's chunks into the job's relay (waiting while it is full), then marks the end of
// the input and waits until the rank has read it all or the job has ended. FAILED_PRECONDITION
// when the job takes no input (submitted without --stdin).
grpc::Status ServeWriteStdin(JobManager* jobs, grpc::ServerContext* context,
                             grpc::ServerReader<v1::StdinData>* reader);

// Streams the job's input to the agent of request.rank (the job's stdin rank); ends OK at the
// input's end or when the job has ended, ABORTED when a later attempt's rank reads it now.
grpc::Status ServeReadStdin(JobManager* jobs, grpc::ServerContext* context,
                            const v1::ReadStdinRequest& request,
                            grpc::ServerWriter<v1::StdinData>* writer);

}  // namespace hvd::launcherd
