# tmalang.cmake — C++ launch headers of tmalang kernels, generated at build time.
#
#   # tmalang_DIR: python -c "import tmalang; print(tmalang.get_cmake_dir())"
#   find_package(tmalang CONFIG REQUIRED)          # or include(<that folder>/tmalang.cmake)
#   add_executable(app main.cpp)
#   tmalang_add_kernel(app kernels/gemm.tma ARCH sm_90a DEFINES BN=128)
#
# and main.cpp includes "gemm.h", loads the kernel with gemm_load(&module, &function) (the cubin
# is in the header) and launches it with gemm_launch(function, args, stream). docs/cpp.md.
#
# tmalang_add_kernel(<target> <source.tma> [ARCH <arch>] [KERNEL <name>] [HEADER <file.h>]
#                    [DEFINES <NAME=VALUE>...])
#   Runs `tmalangc <source> --emit header --embed-cubin` when <target> is built (and again when
#   the source changes), writing <HEADER> (default: the source's stem with .h) into its own
#   folder of the build tree. <target> gets the header as a source, that folder, the folder of
#   tmalang_runtime.h and the CUDA include folder as include directories, C++17, and the driver
#   library (CUDA::cuda_driver) to link. ARCH, KERNEL and DEFINES are tmalangc's --arch, --kernel
#   and -D. Several kernels may go into one target; give kernels whose files share a stem
#   different HEADERs.
#
# TMALANGC: the compiler command, a program or a list such as "python3;-m;tmalang". Default: the
# tmalangc program on the PATH, else `-m tmalang` with the Python interpreter that can import it.

if(CMAKE_VERSION VERSION_LESS 3.17)
  message(FATAL_ERROR "tmalang.cmake needs CMake 3.17 or newer (FindCUDAToolkit)")
endif()
include_guard(GLOBAL)

get_filename_component(TMALANG_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
find_package(CUDAToolkit REQUIRED)   # cuda.h, and the driver library as CUDA::cuda_driver

# The command that runs tmalangc: TMALANGC as given, else one found here.
function(_tmalang_find_compiler)
  if(TMALANGC)
    return()
  endif()
  find_program(TMALANG_TMALANGC_PROGRAM tmalangc)
  if(TMALANG_TMALANGC_PROGRAM)
    set(TMALANGC "${TMALANG_TMALANGC_PROGRAM}" CACHE STRING "the tmalangc command")
    return()
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import tmalang" RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
    if(status EQUAL 0)
      set(TMALANGC "${Python3_EXECUTABLE};-m;tmalang" CACHE STRING "the tmalangc command")
      return()
    endif()
  endif()
  message(FATAL_ERROR "tmalang.cmake: no tmalangc on the PATH and no Python that imports tmalang; "
                      "pass -DTMALANGC=/path/to/tmalangc (or \"python3;-m;tmalang\")")
endfunction()

_tmalang_find_compiler()

function(tmalang_add_kernel target source)
  cmake_parse_arguments(PARSE_ARGV 2 TMA "" "ARCH;KERNEL;HEADER" "DEFINES")
  if(TMA_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tmalang_add_kernel: unexpected arguments ${TMA_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "tmalang_add_kernel: ${target} is not a target")
  endif()
  get_filename_component(source "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  get_filename_component(stem "${source}" NAME_WE)
  if(NOT TMA_HEADER)
    set(TMA_HEADER "${stem}.h")
  endif()
  set(folder "${CMAKE_CURRENT_BINARY_DIR}/tmalang/${target}")
  set(header "${folder}/${TMA_HEADER}")
  set(flags --emit header --embed-cubin)
  if(TMA_ARCH)
    list(APPEND flags --arch "${TMA_ARCH}")
  endif()
  if(TMA_KERNEL)
    list(APPEND flags --kernel "${TMA_KERNEL}")
  endif()
  foreach(define IN LISTS TMA_DEFINES)
    list(APPEND flags -D "${define}")
  endforeach()
  add_custom_command(
    OUTPUT "${header}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${folder}"
    COMMAND ${TMALANGC} "${source}" ${flags} -o "${header}"
    DEPENDS "${source}"
    COMMENT "tmalangc ${source} -> ${TMA_HEADER}"
    VERBATIM)
  target_sources(${target} PRIVATE "${header}")
  target_include_directories(${target} PRIVATE "${folder}" "${TMALANG_INCLUDE_DIR}" ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_features(${target} PRIVATE cxx_std_17)
  if(TARGET CUDA::cuda_driver)
    target_link_libraries(${target} PRIVATE CUDA::cuda_driver)
  else()
    message(WARNING "tmalang_add_kernel: CMake found no CUDA driver library (libcuda); link ${target} to it "
                    "yourself, or set CUDA_cuda_driver_LIBRARY")
  endif()
endfunction()
