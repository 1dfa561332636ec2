// Which sanitizer a test binary is built with (gcc and clang spell it differently):
// CG_TEST_ASAN, CG_TEST_TSAN defined to 1 when so.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define CG_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CG_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CG_TEST_ASAN 1
#endif
#endif
