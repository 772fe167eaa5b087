# All third-party dependencies are found here, once.
#
# LibTorch: from CMAKE_PREFIX_PATH / Torch_DIR / $FP8T_TORCH_PREFIX if given, else from the
# PyTorch wheel of FP8T_PYTHON (default: the project's .venv, then python3 on PATH).

# ---- CUDA compiler (optional), before LibTorch -------------------------------------------
# LibTorch's CMake config enables the CUDA language itself and warns when CMAKE_CUDA_ARCHITECTURES
# is then defined (it picks architectures from TORCH_CUDA_ARCH_LIST). CMake defines it on
# enable_language(CUDA) with the compiler's default. Nothing here uses that default (kernels/ has
# CUDA_ARCHITECTURES OFF and its own -gencode flags, FP8T_CUDA_GENCODE), so CUDA is enabled here,
# first, and the default dropped; a value given on the command line is kept.
if(FP8T_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(_fp8t_drop_cuda_arch_default ON)
    endif()
    enable_language(CUDA)
    if(_fp8t_drop_cuda_arch_default)
      unset(CMAKE_CUDA_ARCHITECTURES CACHE)
      unset(CMAKE_CUDA_ARCHITECTURES)
    endif()
  endif()
endif()

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
# Locate TorchConfig.cmake first (without loading it), so that the kineto note below can be
# applied before the config runs.
if(NOT Torch_DIR)
  find_path(_fp8t_torch_config_dir TorchConfig.cmake PATHS ${CMAKE_PREFIX_PATH}
            PATH_SUFFIXES share/cmake/Torch Torch NO_DEFAULT_PATH NO_CACHE)
  if(NOT _fp8t_torch_config_dir)
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
    set(_fp8t_torch_config_dir "${_fp8t_torch_prefix}/Torch")
  endif()
  set(Torch_DIR "${_fp8t_torch_config_dir}" CACHE PATH "The folder of TorchConfig.cmake")
endif()
# Kineto (the profiler library) is linked into libtorch_cpu.so in a shared LibTorch such as the
# wheel's, which ships no separate libkineto; LibTorch's config still looks for one and warns.
# Point it at the library that holds it.
get_filename_component(_fp8t_torch_lib_dir "${Torch_DIR}/../../../lib" ABSOLUTE)
if(NOT kineto_LIBRARY AND NOT EXISTS "${_fp8t_torch_lib_dir}/libkineto.a"
   AND EXISTS "${_fp8t_torch_lib_dir}/libtorch_cpu.so")
  set(kineto_LIBRARY "${_fp8t_torch_lib_dir}/libtorch_cpu.so" CACHE FILEPATH
      "kineto: inside libtorch_cpu.so in a shared LibTorch" FORCE)
endif()
# LibTorch's config links nvrtc from the CUDA toolkit (CUDA_NVRTC_LIB). The wheel ships its own
# copy beside its other CUDA libraries, which LibTorch loads at run time; linking the toolkit's
# copy too would put the same soname in two folders (see the CUDA section below).
file(GLOB _fp8t_wheel_nvrtc "${_fp8t_torch_lib_dir}/../../nvidia/cu*/lib/libnvrtc.so.*")
if(_fp8t_wheel_nvrtc AND NOT DEFINED CACHE{CUDA_NVRTC_LIB})
  list(GET _fp8t_wheel_nvrtc 0 _fp8t_wheel_nvrtc)
  get_filename_component(_fp8t_wheel_nvrtc "${_fp8t_wheel_nvrtc}" ABSOLUTE)
  set(CUDA_NVRTC_LIB "${_fp8t_wheel_nvrtc}" CACHE FILEPATH "nvrtc: the wheel's copy, which LibTorch loads")
endif()
find_package(Torch REQUIRED CONFIG)
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
  if(CMAKE_CUDA_COMPILER)  # enabled above, before LibTorch
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
        # LibTorch's config links the toolkit's copies (CUDA::cudart, CUDA::nvrtc, ...) of the
        # libraries the wheel ships: two folders would then hold the same sonames and CMake could
        # not order the run-time search path. Link the wheel's copies everywhere, the ones loaded
        # at run time anyway.
        foreach(_lib cudart nvrtc cublas cublasLt)
          file(GLOB _wheel_lib "${_dir}/lib${_lib}.so.*")
          if(TARGET CUDA::${_lib} AND _wheel_lib)
            list(GET _wheel_lib 0 _wheel_lib)
            set_target_properties(CUDA::${_lib} PROPERTIES IMPORTED_LOCATION "${_wheel_lib}")
          endif()
        endforeach()
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

# ---- cudnn-frontend (optional): fp8.attention's cuDNN graphs ------------------------------
# lib/fp8/backends/attention_cuda.cpp builds cuDNN's FP8 attention with cudnn-frontend, a
# header-only C++ library: the PyPI package nvidia-cudnn-frontend ships it as
# site-packages/include/cudnn_frontend.h (scripts/setup.sh installs it into .venv;
# scripts/device-test.sh unpacks a wheel from .whl/). cudnn.h and libcudnn come with the PyTorch
# wheel's nvidia-cudnn package. Without them the build works and `fp8.attention` on CUDA is
# refused at startup.
set(FP8T_HAVE_CUDNN_FRONTEND OFF)
if(FP8T_WITH_CUDA)
  get_filename_component(_fp8t_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  find_path(FP8T_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
            PATHS "${_fp8t_site}/include" "${_fp8t_site}/nvidia/cudnn_frontend/include"
                  "${PROJECT_SOURCE_DIR}/.whl/cudnn_frontend/include"
            DOC "The folder of cudnn_frontend.h (pip install nvidia-cudnn-frontend)" NO_DEFAULT_PATH)
  find_path(FP8T_CUDNN_INCLUDE cudnn.h PATHS "${_fp8t_site}/nvidia/cudnn/include" DOC "The folder of cudnn.h")
  find_library(FP8T_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 PATHS "${_fp8t_site}/nvidia/cudnn/lib"
               DOC "libcudnn (the PyTorch wheel's nvidia-cudnn package)")
  set(_fp8t_cudnn_missing "")
  foreach(_what FP8T_CUDNN_FRONTEND_INCLUDE FP8T_CUDNN_INCLUDE FP8T_CUDNN_LIBRARY)
    if(NOT ${_what})
      list(APPEND _fp8t_cudnn_missing ${_what})
    endif()
  endforeach()
  if(_fp8t_cudnn_missing)
    string(REPLACE ";" ", " _fp8t_cudnn_missing "${_fp8t_cudnn_missing}")
    message(STATUS "fp8train: cuDNN FP8 attention OFF: not found: ${_fp8t_cudnn_missing} (cudnn_frontend.h: "
                   "pip install nvidia-cudnn-frontend into .venv, or -DFP8T_CUDNN_FRONTEND_INCLUDE=<dir>); "
                   "fp8.attention is refused on CUDA")
  else()
    set(FP8T_HAVE_CUDNN_FRONTEND ON)
    message(STATUS "fp8train: cuDNN FP8 attention ON: cudnn-frontend ${FP8T_CUDNN_FRONTEND_INCLUDE}, "
                   "cuDNN ${FP8T_CUDNN_LIBRARY}")
  endif()
endif()

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

# ---- protobuf (optional): TensorBoard event files (lib/run/tensorboard/) -----------------
# Debian: libprotobuf-dev + protobuf-compiler (scripts/setup.sh). Only the lite runtime is
# linked. Without it, run.tensorboard is refused with a clear error (exit 2).
find_package(Protobuf QUIET)
set(FP8T_HAVE_PROTOBUF OFF)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND TARGET protobuf::libprotobuf-lite)
  # protoc from an unpacked .deb needs its libraries on LD_LIBRARY_PATH; check that it runs.
  execute_process(COMMAND ${Protobuf_PROTOC_EXECUTABLE} --version RESULT_VARIABLE _fp8t_protoc_rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(_fp8t_protoc_rc EQUAL 0)
    set(FP8T_HAVE_PROTOBUF ON)
  endif()
endif()
message(STATUS "fp8train: protobuf for TensorBoard files ${FP8T_HAVE_PROTOBUF} ${Protobuf_VERSION}")
