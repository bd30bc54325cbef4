# giftd's core (daemon.h) and the binary. Included from daemon/CMakeLists.txt.
add_library(gift_daemon
  kv_store.cc
  request_limits.cc
  factor_check.cc
  session.cc
  refresher.cc
  daemon_metrics.cc
  daemon.cc
  daemon_poll.cc
  daemon_control.cc
  daemon_peer.cc
  daemon_peer_windows.cc
)
target_link_libraries(gift_daemon
  PUBLIC gift_log gift_proto gift_shm gift_selector gift_factor_builder
         gift_daemon_config gift_metrics gift_kernels gift_peer_link
         absl::synchronization absl::time absl::str_format Threads::Threads)

add_executable(giftd giftd_main.cc thread_stack_floor.cc)
target_link_libraries(giftd PRIVATE gift_daemon gift_grpc_server gift_metrics_process
  gift_metrics_http gift_kernels ${CMAKE_DL_LIBS})

if(GIFT_BUILD_TESTS)
  gift_add_test(kv_store_test SOURCES kv_store_test.cc LIBS gift_daemon)
  gift_add_test(daemon_test SOURCES daemon_test.cc LIBS gift_daemon)
  gift_add_test(daemon_shm_test SOURCES daemon_shm_test.cc LIBS gift_daemon)
  gift_add_test(daemon_control_test SOURCES daemon_control_test.cc
    LIBS gift_daemon)
  gift_add_test(factor_check_test SOURCES factor_check_test.cc
    LIBS gift_daemon gift_linalg Eigen3::Eigen)
  gift_add_test(daemon_limits_test SOURCES daemon_limits_test.cc
    LIBS gift_daemon)
  # An in-process PeerLink for the daemon's multi-node tests (no gRPC).
  add_library(gift_fake_peer_link fake_peer_link.cc)
  target_link_libraries(gift_fake_peer_link PUBLIC gift_proto gift_common
    absl::status absl::statusor absl::synchronization absl::time
    PRIVATE absl::str_format)
  gift_add_test(daemon_peer_test SOURCES daemon_peer_test.cc
    LIBS gift_daemon gift_fake_peer_link)
endif()
