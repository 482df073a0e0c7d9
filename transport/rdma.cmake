# rdma.cmake: the RDMA backend's files, included by transport/CMakeLists.txt. gv_rdma_proto is
# the device-free protocol core (always built, unit-tested everywhere); the verbs side needs
# libibverbs + librdmacm and goes into gv_transport through GV_RDMA_BACKEND_SOURCES.
set(GV_RDMA_DIR ${CMAKE_CURRENT_LIST_DIR})
add_library(gv_rdma_proto STATIC
  ${GV_RDMA_DIR}/rdma_proto.c ${GV_RDMA_DIR}/rdma_proto_rx.c ${GV_RDMA_DIR}/rdma_proto_wire.c
  ${GV_RDMA_DIR}/rdma_regcache.c)
target_include_directories(gv_rdma_proto PUBLIC ${GV_RDMA_DIR})
target_link_libraries(gv_rdma_proto PUBLIC gv_common)

# The verbs backend. GV_HAVE_RDMA comes from the top-level CMakeLists (libibverbs/librdmacm).
set(GV_RDMA_BACKEND_SOURCES ${GV_RDMA_DIR}/rdma_select.c)
if(GV_HAVE_RDMA)
  list(APPEND GV_RDMA_BACKEND_SOURCES ${GV_RDMA_DIR}/rdma.c ${GV_RDMA_DIR}/rdma_cm.c
       ${GV_RDMA_DIR}/rdma_dev.c)
  if(GV_HAVE_CUDA)
    list(APPEND GV_RDMA_BACKEND_SOURCES ${GV_RDMA_DIR}/rdma_gpu.c)
  else()
    list(APPEND GV_RDMA_BACKEND_SOURCES ${GV_RDMA_DIR}/rdma_gpu_stub.c)
  endif()
else()
  list(APPEND GV_RDMA_BACKEND_SOURCES ${GV_RDMA_DIR}/rdma_stub.c)
endif()
