# All third-party dependencies are found here, once.
#
# LibTorch: from CMAKE_PREFIX_PATH / Torch_DIR / $FP8T_TORCH_PREFIX if given, else from the
# PyTorch wheel of FP8T_PYTHON (default: the project's .venv, then python3 on PATH).

# ---- LibTorch ---------------------------------------------------------------------------
# LibTorch's CMake config appends -gencode flags for a dozen architectures to CMAKE_CUDA_FLAGS;
# kernels/ chooses its own targets (FP8T_CUDA_GENCODE), so keep the flags as they were.
set(_fp8t_saved_cuda_flags "${CMAKE_CUDA_FLAGS}")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0a")
endif()
if(NOT Torch_DIR AND DEFINED ENV{FP8T_TORCH_PREFIX})
  list(APPEND CMAKE_PREFIX_PATH "$ENV{FP8T_TORCH_PREFIX}")
endif()
find_package(Torch QUIET CONFIG)
if(NOT Torch_FOUND)
  if(NOT FP8T_PYTHON)
    if(EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python3")
      set(FP8T_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python3")
    else()
      find_program(FP8T_PYTHON NAMES python3 python REQUIRED)
    endif()
  endif()
  execute_process(
    COMMAND "${FP8T_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _fp8t_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET RESULT_VARIABLE _fp8t_torch_rc)
  if(NOT _fp8t_torch_rc EQUAL 0)
    message(FATAL_ERROR "LibTorch not found. Run scripts/setup.sh, or pass -DCMAKE_PREFIX_PATH=<libtorch>, "
                        "or set FP8T_TORCH_PREFIX, or -DFP8T_PYTHON=<python with torch>.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_fp8t_torch_prefix}")
  find_package(Torch REQUIRED CONFIG)
endif()
set(CMAKE_CUDA_FLAGS "${_fp8t_saved_cuda_flags}")
message(STATUS "fp8train: LibTorch ${Torch_VERSION} from ${Torch_DIR}")

# Whether this LibTorch has CUDA (the pip wheel does, even on machines without a GPU).
set(FP8T_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(FP8T_TORCH_HAS_CUDA ON)
endif()

# ---- OS packages ------------------------------------------------------------------------
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
if(FP8T_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
endif()

# The fmt clash: the LibTorch wheel ships fmt 12 headers in torch/include/fmt, and its -isystem
# directory is searched before the compiler's default /usr/include, where Debian's fmt 9 (the
# one spdlog 1.10 is built against) lives. A shim directory holding only a link to the OS fmt,
# put first on the include path, makes every `#include <fmt/...>` resolve to the OS fmt.
get_target_property(_fp8t_fmt_includes fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
set(FP8T_FMT_SHIM "${PROJECT_BINARY_DIR}/fmt-shim")
foreach(_dir ${_fp8t_fmt_includes})
  if(EXISTS "${_dir}/fmt/format.h")
    file(MAKE_DIRECTORY "${FP8T_FMT_SHIM}")
    file(CREATE_LINK "${_dir}/fmt" "${FP8T_FMT_SHIM}/fmt" SYMBOLIC)
    break()
  endif()
endforeach()

# yaml-cpp names its target differently across versions.
if(TARGET yaml-cpp::yaml-cpp)
  set(FP8T_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(FP8T_YAML_TARGET yaml-cpp)
endif()

# ---- CUDA (optional) --------------------------------------------------------------------
set(FP8T_WITH_CUDA OFF)
if(FP8T_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(FP8T_HAVE_NVCC ON)
    if(FP8T_TORCH_HAS_CUDA)
      set(FP8T_WITH_CUDA ON)
    endif()
    # Link the CUDA runtime and cuBLASLt that LibTorch itself loads. The pip wheel ships them
    # under site-packages/nvidia/cu*/lib; a second, older copy from the toolkit would shadow
    # them (same soname) and LibTorch could miss symbols. Headers still come from the toolkit.
    file(GLOB _fp8t_wheel_cuda_dirs "${TORCH_INSTALL_PREFIX}/../nvidia/cu*/lib")
    set(FP8T_CUDART CUDA::cudart)
    set(FP8T_CUBLASLT CUDA::cublasLt)
    foreach(_dir ${_fp8t_wheel_cuda_dirs})
      file(GLOB _rt "${_dir}/libcudart.so.*")
      file(GLOB _lt "${_dir}/libcublasLt.so.*")
      if(_rt AND _lt)
        list(GET _rt 0 FP8T_CUDART)
        list(GET _lt 0 FP8T_CUBLASLT)
      endif()
    endforeach()
    message(STATUS "fp8train: CUDA runtime ${FP8T_CUDART}, cuBLASLt ${FP8T_CUBLASLT}")
  endif()
endif()

# The wheel's libtorch_cuda.so finds NCCL, cuDNN, ... through its own RPATH at run time; tell
# the linker the same directories so it does not resolve them from an older system copy.
file(GLOB _fp8t_wheel_lib_dirs "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
if(_fp8t_wheel_lib_dirs)
  string(REPLACE ";" ":" _fp8t_rpath_link "${_fp8t_wheel_lib_dirs}")
  set(FP8T_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${_fp8t_rpath_link}")
endif()
message(STATUS "fp8train: CUDA kernels ${FP8T_HAVE_NVCC}, CUDA backend ${FP8T_WITH_CUDA}")

# ---- c10d backends for data-parallel training (lib/dist) ---------------------------------
# The wheel's LibTorch contains ProcessGroupGloo and ProcessGroupNCCL but not the headers of
# gloo and NCCL that their headers include. gloo's come from the OS (Debian: libgloo-dev; only
# the headers are used, the code is inside LibTorch); nccl.h comes with the wheel's
# nvidia-nccl package. Without gloo headers, CPU data-parallel runs report a clear error.
find_path(FP8T_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(FP8T_GLOO_INCLUDE_DIR)
  set(FP8T_HAVE_GLOO ON)
else()
  set(FP8T_HAVE_GLOO OFF)
endif()
find_path(FP8T_NCCL_INCLUDE_DIR nccl.h HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" NO_DEFAULT_PATH)
if(NOT FP8T_NCCL_INCLUDE_DIR)
  find_path(FP8T_NCCL_INCLUDE_DIR nccl.h)
endif()
message(STATUS "fp8train: gloo headers ${FP8T_GLOO_INCLUDE_DIR}, nccl.h ${FP8T_NCCL_INCLUDE_DIR}")
