/* Symbol visibility for libddstore's public functions. */
#ifndef DDSTORE_EXPORT_H
#define DDSTORE_EXPORT_H

#if defined(_WIN32)
#  define DDS_API
#elif defined(__GNUC__) || defined(__clang__)
#  define DDS_API __attribute__((visibility("default")))
#else
#  define DDS_API
#endif

#endif /* DDSTORE_EXPORT_H */
