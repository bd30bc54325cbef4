# giftd's link to the other daemons of its job (peer_link.h). Included from
# daemon/CMakeLists.txt. Internal headers: peer_link_impl.h (the link:
# peer_link.cc sends and setup, peer_link_members.cc membership) and
# peer_link_internal.h (the Peer service adapter, the per-peer send queues).
add_library(gift_peer_link peer_link.cc peer_link_members.cc
  peer_link_server.cc peer_link_sender.cc)
target_link_libraries(gift_peer_link PUBLIC gift_proto gift_common absl::status
  absl::statusor absl::time PRIVATE gift_grpc_server gift_log absl::synchronization
  absl::strings absl::str_format gRPC::grpc++)

if(GIFT_BUILD_TESTS)
  gift_add_test(peer_link_test SOURCES peer_link_test.cc
    LIBS gift_peer_link gift_proto gRPC::grpc++ absl::synchronization)
  gift_add_test(peer_link_sender_test SOURCES peer_link_sender_test.cc
    LIBS gift_peer_link absl::synchronization)
endif()
