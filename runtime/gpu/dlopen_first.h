// The first library of a list that dlopen can load: the CUDA runtime (cuda_probe.cc), hvd's CUDA
// plugin (gpu_backend.cc) and NCCL (cuda/nccl_loader.cc) are each found this way. Header-only:
// the plugin links no hvd library.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace hvd::runtime::gpu {

// Opens the first of `candidates` that loads (RTLD_NOW | RTLD_LOCAL) and names it in *loaded; the
// handle is never closed (CUDA, the plugin's streams and NCCL's proxy threads live as long as the
// process). Null when none loads, with each candidate's dlerror in *tried ("; "-separated), for
// the caller's message.
inline void* DlopenFirst(const std::vector<std::string>& candidates, std::string* loaded,
                         std::string* tried) {
  tried->clear();
  for (const std::string& path : candidates) {
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *loaded = path;
      return lib;
    }
    const char* why = dlerror();
    *tried += (tried->empty() ? "" : "; ") + std::string(why != nullptr ? why : path.c_str());
  }
  return nullptr;
}

}  // namespace hvd::runtime::gpu
