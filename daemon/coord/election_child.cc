// election_test's stand-in for a daemon that dies without a goodbye: it
// campaigns for a job and then sleeps until the test SIGKILLs it.
//   election_child ENDPOINT JOB INSTANCE ADDRESS TTL_SECONDS
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "daemon/coord/election.h"
#include "daemon/log.h"

int main(int argc, char** argv) {
  using namespace gift::daemon::coord;  // NOLINT(build/namespaces)
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s ENDPOINT JOB INSTANCE ADDRESS TTL\n",
                 argv[0]);
    return 2;
  }
  EtcdOptions etcd_options;
  etcd_options.endpoints = {argv[1]};
  auto etcd = EtcdClient::Create(etcd_options);
  if (!etcd.ok()) {
    std::fprintf(stderr, "%s\n", etcd.status().ToString().c_str());
    return 1;
  }
  ElectionOptions o;
  o.job_id = argv[2];
  o.instance = argv[3];
  o.address = argv[4];
  o.ttl = absl::Seconds(std::atoi(argv[5]));
  auto election = Election::Start(std::move(*etcd), o);
  if (!election.ok()) {
    std::fprintf(stderr, "%s\n", election.status().ToString().c_str());
    return 1;
  }
  for (;;) pause();
}
