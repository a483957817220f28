# Finds the CUDA toolkit for hvd's CUDA plugin (runtime/gpu/cuda/): included from the top-level
# CMakeLists.txt when HVD_WITH_CUDA is ON, in the top directory's scope, because enable_language
# and the CUDA::* imported targets must be visible to the plugin, the GPU tests and the GPU bench.
#
# Sets HVD_CUDA_ENABLED (ON when nvcc and the runtime were found) and HVD_NCCL_INCLUDE_DIR (the
# folder of nccl.h, or HVD_NCCL_INCLUDE_DIR-NOTFOUND: the plugin then builds without NCCL and says
# so at run time). Without the toolkit everything else builds and device tensors are refused.

set(HVD_CUDA_ENABLED OFF)
# nvcc is rarely on PATH (/usr/local/cuda/bin is not); take the standard install when nothing else
# (-DCMAKE_CUDA_COMPILER, $CUDACXX) chose one.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
# Turing, Ampere as machine code; Hopper as machine code and PTX (which later GPUs JIT). One small
# .cu keeps this cheap for CI. -DCMAKE_CUDA_ARCHITECTURES=native (or a list) overrides it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "75-real;80-real;90" CACHE STRING "CUDA architectures for hvd")
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  enable_language(CUDA)
  find_package(CUDAToolkit)
endif()
if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
  set(HVD_CUDA_ENABLED ON)
  find_path(HVD_NCCL_INCLUDE_DIR nccl.h
            HINTS /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS}
            DOC "folder of nccl.h (the plugin loads libnccl.so.2 at run time; it never links it)")
  if(HVD_NCCL_INCLUDE_DIR AND EXISTS ${HVD_NCCL_INCLUDE_DIR}/nccl.h)
    message(STATUS "CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_COMPILER}), nccl.h in "
                   "${HVD_NCCL_INCLUDE_DIR}: building libhvd_cuda.so")
  else()
    message(STATUS "CUDA ${CUDAToolkit_VERSION}: no nccl.h in HVD_NCCL_INCLUDE_DIR="
                   "${HVD_NCCL_INCLUDE_DIR} (set it to the folder of nccl.h): "
                   "building libhvd_cuda.so without NCCL; GPU collectives will go through the host")
  endif()
else()
  set(hvd_cuda_looked "/usr/local/cuda/bin/nvcc, nvcc on PATH")
  if(DEFINED ENV{CUDACXX})
    set(hvd_cuda_looked "$ENV{CUDACXX} (CUDACXX), ${hvd_cuda_looked}")
  endif()
  message(STATUS "CUDA toolkit not found (looked in ${hvd_cuda_looked}; set CMAKE_CUDA_COMPILER "
                 "to nvcc): building without GPU support; device tensors will be refused")
endif()
