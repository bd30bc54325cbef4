/* GIFT_EXPORT: marks the public symbols of libgift.
 *
 * libgift.so is built with hidden visibility by default (and a linker
 * version script), so that only what the public headers in include/gift/
 * declare is exported: the C ABI (gift_*) and the C++ API (namespace gift,
 * classes and functions marked GIFT_EXPORT). Nothing of abseil, Gloo, gRPC,
 * protobuf or the library's internals is visible to a program that links it.
 *
 * This header is valid C and C++. */
#ifndef GIFT_EXPORT_H_
#define GIFT_EXPORT_H_

#if defined(_WIN32)
#if defined(GIFT_BUILDING_LIBRARY)
#define GIFT_EXPORT __declspec(dllexport)
#else
#define GIFT_EXPORT __declspec(dllimport)
#endif
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__cplusplus)
/* A standard attribute in C++, so that it may follow others, as in
 * `class [[nodiscard]] GIFT_EXPORT Status`. */
#define GIFT_EXPORT [[gnu::visibility("default")]]
#elif defined(__GNUC__) || defined(__clang__)
#define GIFT_EXPORT __attribute__((visibility("default")))
#else
#define GIFT_EXPORT
#endif

#endif /* GIFT_EXPORT_H_ */
