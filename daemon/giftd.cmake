# giftd's core (core/daemon.h: the Daemon façade and its components) and the
# binary. Included from daemon/CMakeLists.txt, so that the binary stays at
# build/daemon/giftd.
add_library(gift_daemon
  core/kv_store.cc
  core/request_limits.cc
  factor_check.cc
  core/session.cc
  core/session_table.cc
  core/window_collector.cc
  core/factor_store.cc
  core/planner.cc
  core/sketch_schedule.cc
  core/job_layout.cc
  core/series.cc
  core/peer_coordinator.cc
  core/plan_publisher.cc
  core/telemetry.cc
  core/factor_pipeline.cc
  core/factor_pipeline_peer.cc
  core/gauges.cc
  core/registrar.cc
  core/control_plane.cc
  core/peer_messages.cc
  refresher.cc
  core/daemon.cc
  core/daemon_peer.cc
)
target_link_libraries(gift_daemon
  PUBLIC gift_log gift_proto gift_shm gift_selector gift_factor_builder
         gift_daemon_config gift_metrics gift_daemon_metrics gift_kernels
         gift_wire_format_proto
         gift_peer_link gift_coord absl::synchronization absl::time absl::str_format
         Threads::Threads)

add_executable(giftd giftd_main.cc thread_stack_floor.cc)
target_link_libraries(giftd PRIVATE gift_daemon gift_grpc_server gift_metrics_process
  gift_metrics_http gift_kernels ${CMAKE_DL_LIBS})

if(GIFT_BUILD_TESTS)
  # The core's components, each without a Daemon, and the façade
  # (core/NAME_test.cc).
  foreach(t kv_store session_table window_collector factor_store planner
          job_layout telemetry factor_pipeline registrar control_plane
          plan_publisher gauges peer_messages daemon daemon_shm daemon_control
          daemon_limits series poll_gate sketch_schedule)
    gift_add_test(${t}_test SOURCES core/${t}_test.cc LIBS gift_daemon)
  endforeach()
  gift_add_test(peer_coordinator_test SOURCES core/peer_coordinator_test.cc
    LIBS gift_daemon gift_fake_peer_link)
  gift_add_test(factor_check_test SOURCES factor_check_test.cc
    LIBS gift_daemon gift_linalg Eigen3::Eigen)
  gift_add_test(daemon_peer_test SOURCES core/daemon_peer_test.cc
    LIBS gift_daemon gift_fake_peer_link)
  gift_add_test(daemon_peer_format_test SOURCES core/daemon_peer_format_test.cc
    LIBS gift_daemon gift_fake_peer_link)
endif()
