# Included by the top-level CMakeLists.txt before any library when HVD_FUZZ is ON, so that every
# library a fuzz target links (hvd_base, hvd_comm, hvd_proto, hvd_control, hvd_launcherd_lib) is
# compiled with AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's coverage
# instrumentation.
# scripts/fuzz.sh makes this configuration in build-fuzz; the main build (build/) never sees it.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR
    "HVD_FUZZ needs clang for libFuzzer (Debian: clang-14 libclang-rt-14-dev); configure a "
    "separate build directory with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang, as "
    "scripts/fuzz.sh does")
endif()
if(NOT HVD_BUILD_CONTROL_PLANE)
  message(FATAL_ERROR "HVD_FUZZ needs HVD_BUILD_CONTROL_PLANE=ON (the targets fuzz its parsers)")
endif()
# UBSan findings abort (and so count as crashes) instead of printing and going on.
add_compile_options(-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
