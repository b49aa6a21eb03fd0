# moe_import_runtime: the `moe_runtime` target of an existing moe-mlir
# build, for a project configured outside that build (a trainer, the
# codegen tests) so that moe_compile_model can link generated steps to it.
#
#   list(APPEND CMAKE_MODULE_PATH <moe-mlir>/cmake)
#   include(MoeImportRuntime)
#   moe_import_runtime(LIBRARY <path/libmoe_runtime.a>
#                      SOURCE_DIR <moe-mlir checkout>
#                      [CUDA ON|OFF])  # was the runtime built with CUDA?
#
# The archive's own dependencies come along: moe_planning (routing traces;
# its archive beside the runtime's, or in planning/ there), MPI, OpenBLAS,
# threads and,
# for a runtime with its CUDA backend, cudart, cuBLAS and NCCL (a CPU-only
# trainer does not call them, but the archive references them).
include_guard(GLOBAL)

function(moe_import_runtime)
  cmake_parse_arguments(ARG "" "LIBRARY;SOURCE_DIR;CUDA" "" ${ARGN})
  if(NOT ARG_LIBRARY OR NOT ARG_SOURCE_DIR)
    message(FATAL_ERROR "moe_import_runtime: LIBRARY and SOURCE_DIR are "
                        "required")
  endif()
  if(NOT EXISTS "${ARG_LIBRARY}")
    message(FATAL_ERROR "moe_import_runtime: no runtime library at "
                        "${ARG_LIBRARY} (build moe-mlir first)")
  endif()
  get_filename_component(dir "${ARG_LIBRARY}" DIRECTORY)
  find_file(MOE_PLANNING_LIBRARY libmoe_planning.a
    PATHS "${dir}" "${dir}/planning" "${dir}/../runtime/planning"
    NO_DEFAULT_PATH)
  if(NOT MOE_PLANNING_LIBRARY)
    message(FATAL_ERROR "moe_import_runtime: no libmoe_planning.a beside "
                        "${ARG_LIBRARY} (the runtime's routing traces need it)")
  endif()
  find_package(Threads REQUIRED)
  find_package(MPI REQUIRED COMPONENTS CXX)
  find_package(OpenBLAS CONFIG REQUIRED)
  set(deps "${MOE_PLANNING_LIBRARY}" MPI::MPI_CXX ${OpenBLAS_LIBRARIES}
      Threads::Threads)
  if(ARG_CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(MOE_NCCL_LIBRARY nccl REQUIRED
      HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64)
    list(APPEND deps CUDA::cudart CUDA::cublas ${MOE_NCCL_LIBRARY})
  endif()
  add_library(moe_runtime STATIC IMPORTED GLOBAL)
  set_target_properties(moe_runtime PROPERTIES
    IMPORTED_LOCATION "${ARG_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ARG_SOURCE_DIR}/runtime/include"
    INTERFACE_LINK_LIBRARIES "${deps}")
endfunction()
