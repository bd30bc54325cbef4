// A floor under the thread stack sizes that libraries request.
//
// Debian's civetweb is built with USE_STACK_SIZE=102400 and starts its
// threads with 100 KiB stacks. glibc carves a thread's static TLS out of its
// stack, and a giftd linked with cuBLAS / cuSOLVER / OpenBLAS carries about
// 220 KiB of static TLS, so pthread_create fails with EINVAL and /metrics
// cannot start. Defining pthread_attr_setstacksize in the executable
// interposes it for every shared library; requests below kMinStack are
// raised to it and forwarded to glibc's implementation.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>

namespace {

constexpr size_t kMinStack = size_t{1} << 20;  // 1 MiB

using SetStackSize = int (*)(pthread_attr_t*, size_t);

SetStackSize Real() {
  static const SetStackSize real = reinterpret_cast<SetStackSize>(
      dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t stacksize) {
  SetStackSize real = Real();
  if (real == nullptr) return ENOSYS;
  return real(attr, std::max(stacksize, kMinStack));
}
