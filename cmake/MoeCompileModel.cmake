# moe_compile_model: a model (.mlir or .onnx) -> scheduled step -> C++ -> a
# static library a trainer links (docs/codegen.md).
#
#   include(MoeCompileModel)
#   moe_compile_model(<target> MODEL <file.mlir|file.onnx>
#                     [GRID NxG]             # ONNX: the device grid (--onnx-grid)
#                     [PIPELINE "<options>"] # moe-flowmoe-pipeline options
#                     [PREFIX <name>])       # <name>_declare / <name>_step
#
# runs
#   moe-opt MODEL [--onnx-grid=GRID] --moe-flowmoe-pipeline="PIPELINE"
#           --moe-convert-to-emitc="prefix=PREFIX"
#   mlir-translate --mlir-to-cpp
# and compiles the C++ into <target>, linked against the runtime target
# `moe_runtime` (build it in the same project, or import it). PREFIX
# defaults to <target> with non-identifier characters replaced by '_'.
#
# Tools: MOE_OPT_EXECUTABLE (default: the moe-opt target of this build, else
# moe-opt on PATH) and MOE_MLIR_TRANSLATE_EXECUTABLE (default:
# mlir-translate-22 / mlir-translate, also in /usr/lib/llvm-22/bin).
include_guard(GLOBAL)

set(MOE_COMPILE_MODEL_RUNTIME_INCLUDE
    "${CMAKE_CURRENT_LIST_DIR}/../runtime/include"
    CACHE INTERNAL "moe_rt headers for generated steps")

function(moe_compile_model target)
  cmake_parse_arguments(ARG "" "MODEL;GRID;PIPELINE;PREFIX" "" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "moe_compile_model(${target}): unknown arguments "
                        "${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_MODEL)
    message(FATAL_ERROR "moe_compile_model(${target}): MODEL is required")
  endif()
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE)
  if(NOT ARG_PIPELINE)
    set(ARG_PIPELINE "degree=2 policy=flowmoe")
  endif()
  if(NOT ARG_PREFIX)
    string(MAKE_C_IDENTIFIER "${target}" ARG_PREFIX)
  endif()

  set(import_args)
  if(model MATCHES "\\.[oO][nN][nN][xX]$")
    if(ARG_GRID)
      list(APPEND import_args "--onnx-grid=${ARG_GRID}")
    endif()
  elseif(model MATCHES "\\.mlir$")
    if(ARG_GRID)
      message(FATAL_ERROR "moe_compile_model(${target}): GRID is for ONNX "
                          "models; a .mlir model names its grid in its IR")
    endif()
  else()
    message(FATAL_ERROR "moe_compile_model(${target}): MODEL must end in "
                        ".mlir or .onnx: ${ARG_MODEL}")
  endif()

  set(opt "${MOE_OPT_EXECUTABLE}")
  set(opt_dep)
  if(NOT opt)
    if(TARGET moe-opt)
      set(opt "$<TARGET_FILE:moe-opt>")
      set(opt_dep moe-opt)
    else()
      find_program(MOE_OPT_FOUND moe-opt REQUIRED)
      set(opt "${MOE_OPT_FOUND}")
    endif()
  endif()
  set(translate "${MOE_MLIR_TRANSLATE_EXECUTABLE}")
  if(NOT translate)
    find_program(MOE_MLIR_TRANSLATE_FOUND
      NAMES mlir-translate-22 mlir-translate
      HINTS /usr/lib/llvm-22/bin REQUIRED)
    set(translate "${MOE_MLIR_TRANSLATE_FOUND}")
  endif()

  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${target}.moe")
  set(emitc "${dir}/${target}.emitc.mlir")
  set(cpp "${dir}/${target}.cpp")
  add_custom_command(
    OUTPUT "${emitc}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${dir}"
    COMMAND "${opt}" "${model}" ${import_args}
            "--moe-flowmoe-pipeline=${ARG_PIPELINE}"
            "--moe-convert-to-emitc=prefix=${ARG_PREFIX}"
            -o "${emitc}"
    DEPENDS "${model}" ${opt_dep}
    COMMENT "moe-opt: scheduling ${ARG_MODEL} (${ARG_PIPELINE})"
    VERBATIM)
  add_custom_command(
    OUTPUT "${cpp}"
    COMMAND "${translate}" --mlir-to-cpp "${emitc}" -o "${cpp}"
    DEPENDS "${emitc}"
    COMMENT "mlir-translate: ${target}.cpp"
    VERBATIM)

  add_library(${target} STATIC "${cpp}")
  target_include_directories(${target} PUBLIC
    "${MOE_COMPILE_MODEL_RUNTIME_INCLUDE}")
  set_target_properties(${target} PROPERTIES
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    MOE_MODEL_PREFIX "${ARG_PREFIX}")
  if(TARGET moe_runtime)
    target_link_libraries(${target} PUBLIC moe_runtime)
  else()
    message(FATAL_ERROR "moe_compile_model(${target}): no moe_runtime "
                        "target (add_subdirectory the runtime, or import it)")
  endif()
endfunction()
