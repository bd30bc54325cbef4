// Forwarding header: giftd's core moved to daemon/core/daemon.h (issue 16).
// Kept for client/giftd_connection_test.cc; include daemon/core/daemon.h in
// new code. Remove once nothing includes this path.
#ifndef GIFT_DAEMON_DAEMON_H_
#define GIFT_DAEMON_DAEMON_H_

#include "daemon/core/daemon.h"  // IWYU pragma: export

#endif  // GIFT_DAEMON_DAEMON_H_
