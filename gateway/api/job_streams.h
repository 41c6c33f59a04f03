// The job API's two server streams as callback reactors: no thread is held
// while a stream waits. A Watch is woken by writes of its job's state; a
// following Logs stream reads appended bytes on JobEvents' shared tick, one
// read or write in flight at a time, so its memory is one chunk.
#pragma once

#include <grpcpp/grpcpp.h>

#include "fedgate/v1/jobs.pb.h"
#include "gateway/security/identity.h"

namespace fedgate::gateway {

class JobManager;

// Each deletes itself in OnDone. The caller's stream slot
// (api.max_streams_per_caller) is taken in the constructor and given back
// in OnDone.
grpc::ServerWriteReactor<v1::Job>* NewWatchReactor(JobManager* jobs, Identity caller,
                                                   const v1::WatchJobRequest& req);
grpc::ServerWriteReactor<v1::LogsResponse>* NewLogsReactor(JobManager* jobs, Identity caller,
                                                           const v1::LogsRequest& req);

}  // namespace fedgate::gateway
