// Forwarding header: giftd's gRPC servers moved to daemon/grpc/grpc_server.h
// (issue 16). Kept for client/giftd_connection_test.cc; include
// daemon/grpc/grpc_server.h in new code. Remove once nothing includes this
// path.
#ifndef GIFT_DAEMON_GRPC_SERVER_H_
#define GIFT_DAEMON_GRPC_SERVER_H_

#include "daemon/grpc/grpc_server.h"  // IWYU pragma: export

#endif  // GIFT_DAEMON_GRPC_SERVER_H_
