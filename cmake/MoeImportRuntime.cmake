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
# threads and, for a runtime with its CUDA backend, libdl: the backend is a
# module the archive opens on first CUDA use (libmoe_runtime_cuda.so, next to
# the archive's build; runtime/src/cuda/CudaModule.h), so the trainer does
# not link cudart, cuBLAS or NCCL, and a CPU run does not load them.
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
    list(APPEND deps ${CMAKE_DL_LIBS})
  endif()
  add_library(moe_runtime STATIC IMPORTED GLOBAL)
  set_target_properties(moe_runtime PROPERTIES
    IMPORTED_LOCATION "${ARG_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ARG_SOURCE_DIR}/runtime/include"
    INTERFACE_LINK_LIBRARIES "${deps}")
endfunction()
