// A hand-made Peer.Join for the peer integration test: what a bad peer
// sends (no token, a wrong token, another job id, another shared-memory
// layout version), aimed at a daemon's Peer address. Runs in a node's
// network namespace through scripts/netns.sh exec.
//
//   peer_probe --address=10.77.1.1:50152 --job=J [--token-file=F]
//              [--layout-version=N]
//
// Prints "code=NAME message=TEXT" with the call's gRPC status and exits 0
// (whatever the status), 2 on bad flags.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gift/v1/peer.grpc.pb.h"
#include "shm/layout.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::testing_daemon {
namespace {

struct Flags {
  std::string address, job, token_file;
  int64_t layout_version = shm::kLayoutVersion;
};

int Main(int argc, char** argv) {
  Flags f;
  const absl::Status parsed =
      ParseFlagsInto(argc, argv,
                     {{"address", &f.address},
                      {"job", &f.job},
                      {"token-file", &f.token_file},
                      {"layout-version", &f.layout_version}});
  if (!parsed.ok() || f.address.empty()) {
    std::cerr << "peer_probe: " << parsed.message()
              << " (need --address=HOST:PORT --job=J)\n";
    return 2;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  if (!f.token_file.empty()) {
    std::stringstream token;
    token << std::ifstream(f.token_file).rdbuf();
    context.AddMetadata(
        "authorization",
        absl::StrCat("Bearer ", absl::StripAsciiWhitespace(token.str())));
  }
  v1::JoinRequest request;
  request.set_job_id(f.job);
  request.set_layout_version(static_cast<uint32_t>(f.layout_version));
  request.mutable_self()->set_node("peer-probe");
  request.mutable_self()->set_address("127.0.0.1:1");
  request.mutable_self()->set_instance("probe");
  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel(f.address, grpc::InsecureChannelCredentials()));
  v1::JoinResponse response;
  const grpc::Status s = stub->Join(&context, request, &response);
  std::cout << "code="
            << absl::StatusCodeToString(
                   static_cast<absl::StatusCode>(s.error_code()))
            << " message=" << s.error_message() << std::endl;
  return 0;
}

}  // namespace
}  // namespace gift::testing_daemon

int main(int argc, char** argv) {
  return gift::testing_daemon::Main(argc, argv);
}
