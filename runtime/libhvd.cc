// The source of libhvd.so itself. Everything else comes from the static layers, linked whole;
// libhvd.map decides what is exported.
#include "hvd/c_api.h"

extern "C" HVD_C_EXPORT const char* hvd_version(void) {
  return "0.1.0";
}
