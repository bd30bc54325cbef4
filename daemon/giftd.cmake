# giftd's core (daemon.h) and the binary. Included from daemon/CMakeLists.txt.
add_library(gift_daemon
  log.cc
  kv_store.cc
  session.cc
  refresher.cc
  daemon_metrics.cc
  daemon.cc
  daemon_poll.cc
  daemon_control.cc
)
target_link_libraries(gift_daemon
  PUBLIC gift_proto gift_shm gift_selector gift_factor_builder
         gift_daemon_config gift_metrics gift_kernels absl::synchronization absl::time
         absl::str_format Threads::Threads)

add_executable(giftd giftd_main.cc thread_stack_floor.cc)
target_link_libraries(giftd PRIVATE gift_daemon gift_grpc_server
  gift_metrics_http ${CMAKE_DL_LIBS})

if(GIFT_BUILD_TESTS)
  gift_add_test(kv_store_test SOURCES kv_store_test.cc LIBS gift_daemon)
  gift_add_test(daemon_test SOURCES daemon_test.cc LIBS gift_daemon)
endif()
