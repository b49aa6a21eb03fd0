# moe_compile_model: a model (.mlir or .onnx) -> scheduled step -> C++ -> a
# static library a trainer links (docs/codegen.md).
#
#   include(MoeCompileModel)
#   moe_compile_model(<target> MODEL <file.mlir|file.onnx>
#                     [GRID NxG]             # ONNX: the device grid (--onnx-grid)
#                     [PIPELINE "<options>"] # moe-flowmoe-pipeline options
#                     [PREFIX <name>]        # <name>_declare / <name>_step
#                     [NO_PARAMS])           # no initial-parameter file
#
# runs
#   moe-opt MODEL [--onnx-grid=GRID] --moe-flowmoe-pipeline="PIPELINE"
#     -> <target>.step.mlir (the scheduled step, what moe-run runs)
#   moe-opt --moe-convert-to-emitc="prefix=PREFIX"; mlir-translate --mlir-to-cpp
#   moe-export-params <target>.step.mlir -o <target>.params
# writes <prefix>.h (the header a trainer includes: <prefix>_declare and
# <prefix>_step, the runtime's step API, the parameter file's path)
# and compiles the C++ into <target>, linked against the runtime target
# `moe_runtime` (build it in the same project, or import it). PREFIX
# defaults to <target> with non-identifier characters replaced by '_'.
#
# Initial parameters: <target>.params holds every rank's initial parameters
# (the ONNX file's weights as moe-run loads them, each rank its experts);
# a trainer passes it to moe_step_load_params. Its path is the target
# property MOE_PARAMS_FILE and the macro <PREFIX>_PARAMS_FILE (upper case)
# of the generated header <prefix>_params.h on the target's include path.
#
# Tools: MOE_OPT_EXECUTABLE (default: the moe-opt target of this build, else
# moe-opt on PATH), MOE_EXPORT_PARAMS_EXECUTABLE (default: the
# moe-export-params target, else the one beside MOE_OPT_EXECUTABLE if that
# is set, else moe-export-params on PATH)
# and MOE_MLIR_TRANSLATE_EXECUTABLE (default: mlir-translate-22 /
# mlir-translate, also in /usr/lib/llvm-22/bin).
include_guard(GLOBAL)

set(MOE_COMPILE_MODEL_RUNTIME_INCLUDE
    "${CMAKE_CURRENT_LIST_DIR}/../runtime/include"
    CACHE INTERNAL "moe_rt headers for generated steps")

function(moe_compile_model target)
  cmake_parse_arguments(ARG "NO_PARAMS" "MODEL;GRID;PIPELINE;PREFIX" ""
                        ${ARGN})
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
  # moe-export-params comes with moe-opt (tools/moe-run): the build's
  # target, else the one beside the moe-opt in use.
  set(export "${MOE_EXPORT_PARAMS_EXECUTABLE}")
  set(export_dep)
  if(NOT ARG_NO_PARAMS AND NOT export)
    if(TARGET moe-export-params)
      set(export "$<TARGET_FILE:moe-export-params>")
      set(export_dep moe-export-params)
    else()
      # With a given moe-opt, only the moe-export-params of the same build
      # (beside it): one from PATH could read another IR version.
      if(MOE_OPT_EXECUTABLE)
        get_filename_component(opt_dir "${MOE_OPT_EXECUTABLE}" DIRECTORY)
        find_program(MOE_EXPORT_PARAMS_FOUND moe-export-params
          PATHS "${opt_dir}" NO_DEFAULT_PATH)
      else()
        find_program(MOE_EXPORT_PARAMS_FOUND moe-export-params)
      endif()
      if(NOT MOE_EXPORT_PARAMS_FOUND)
        message(FATAL_ERROR "moe_compile_model(${target}): moe-export-params "
                "not found (build it with moe-opt, set "
                "MOE_EXPORT_PARAMS_EXECUTABLE, or pass NO_PARAMS)")
      endif()
      set(export "${MOE_EXPORT_PARAMS_FOUND}")
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
  set(step "${dir}/${target}.step.mlir")
  set(emitc "${dir}/${target}.emitc.mlir")
  set(cpp "${dir}/${target}.cpp")
  set(params "${dir}/${target}.params")
  # The scheduled step is kept as a file: the C++ and the parameter file
  # both come from it (and moe-run can run it).
  add_custom_command(
    OUTPUT "${step}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${dir}"
    COMMAND "${opt}" "${model}" ${import_args}
            "--moe-flowmoe-pipeline=${ARG_PIPELINE}"
            -o "${step}"
    DEPENDS "${model}" ${opt_dep}
    COMMENT "moe-opt: scheduling ${ARG_MODEL} (${ARG_PIPELINE})"
    VERBATIM)
  add_custom_command(
    OUTPUT "${emitc}"
    COMMAND "${opt}" "${step}" "--moe-convert-to-emitc=prefix=${ARG_PREFIX}"
            -o "${emitc}"
    DEPENDS "${step}" ${opt_dep}
    COMMENT "moe-opt: ${target}.emitc.mlir"
    VERBATIM)
  add_custom_command(
    OUTPUT "${cpp}"
    COMMAND "${translate}" --mlir-to-cpp "${emitc}" -o "${cpp}"
    DEPENDS "${emitc}"
    COMMENT "mlir-translate: ${target}.cpp"
    VERBATIM)

  set(sources "${cpp}")
  if(NOT ARG_NO_PARAMS)
    # Every rank's initial parameters, built with the library (a source
    # that is not compiled), so the trainer's build always has them.
    add_custom_command(
      OUTPUT "${params}"
      COMMAND "${export}" "${step}" -o "${params}"
      DEPENDS "${step}" ${export_dep}
      COMMENT "moe-export-params: ${target}.params"
      VERBATIM)
    list(APPEND sources "${params}")
    # <prefix>_params.h: the file's path for the trainer's code. Written
    # only when it changes, so a reconfigure recompiles nothing.
    string(TOUPPER "${ARG_PREFIX}" macro)
    string(REPLACE "\\" "\\\\" quoted "${params}")
    string(REPLACE "\"" "\\\"" quoted "${quoted}")
    file(CONFIGURE OUTPUT "${dir}/include/${ARG_PREFIX}_params.h" CONTENT
"/* Generated by moe_compile_model(${target}): the path of its initial
 * parameters for every rank (moe_step_load_params, docs/codegen.md). */
#ifndef ${macro}_PARAMS_FILE
#define ${macro}_PARAMS_FILE \"${quoted}\"
#endif
" @ONLY)
  endif()

  # <prefix>.h: what a trainer includes to call the library — the two
  # generated functions, the runtime's step API and (with a parameter
  # file) its path.
  set(params_include)
  if(NOT ARG_NO_PARAMS)
    set(params_include "#include \"${ARG_PREFIX}_params.h\"\n")
  endif()
  file(CONFIGURE OUTPUT "${dir}/include/${ARG_PREFIX}.h" CONTENT
"/* Generated by moe_compile_model(${target}) from ${ARG_MODEL}
 * (pipeline: ${ARG_PIPELINE}); docs/codegen.md. A trainer creates a
 * moe_step (moe_step_create / moe_step_create_on), calls @ARG_PREFIX@_declare
 * once, fills the arguments (moe_step_load_params for the initial
 * parameters), then calls @ARG_PREFIX@_step once per training step. */
#ifndef @ARG_PREFIX@_MOE_MODEL_H
#define @ARG_PREFIX@_MOE_MODEL_H

#include \"moe_rt/step_support.h\"
${params_include}
/* Buffers, arguments, results, grids and streams of the step. */
void @ARG_PREFIX@_declare(moe_step *s);
/* One training step: forward, backward, gradient all-reduce, update. */
void @ARG_PREFIX@_step(moe_step *s);

#endif
" @ONLY)

  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC
    "${MOE_COMPILE_MODEL_RUNTIME_INCLUDE}" "${dir}/include")
  set_target_properties(${target} PROPERTIES
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    MOE_MODEL_PREFIX "${ARG_PREFIX}")
  if(NOT ARG_NO_PARAMS)
    set_target_properties(${target} PROPERTIES MOE_PARAMS_FILE "${params}")
  endif()
  if(TARGET moe_runtime)
    target_link_libraries(${target} PUBLIC moe_runtime)
  else()
    message(FATAL_ERROR "moe_compile_model(${target}): no moe_runtime "
                        "target (add_subdirectory the runtime, or import it)")
  endif()
endfunction()
