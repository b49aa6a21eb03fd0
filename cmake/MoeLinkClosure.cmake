# moe_write_link_closures(<file> <target>...): for each target, every
# library it links — directly or through other targets' LINK_LIBRARIES and
# INTERFACE_LINK_LIBRARIES, as CMake was told — one line per target:
#   <target>: <library> <library> ...
# test/Tools/no-runtime-link.test reads the file to check that no compiler
# library under lib/, and not moe-opt, links the runtime or its MPI,
# OpenBLAS, CUDA and NCCL dependencies (docs/design.md, "The tree"): the
# linker's --as-needed would drop an unused one from the binary, so the
# binary alone cannot show that the build asks for none.
include_guard(GLOBAL)

function(moe_link_closure target out)
  set(todo ${target})
  set(seen)
  set(found)
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(libs ${t} ${prop})
      if(NOT libs)
        continue()
      endif()
      foreach(lib IN LISTS libs)
        # Static libraries wrap their dependencies as $<LINK_ONLY:...>.
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
        if(lib STREQUAL "")
          continue()
        endif()
        list(APPEND found ${lib})
        if(TARGET ${lib})
          list(APPEND todo ${lib})
        endif()
      endforeach()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES found)
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# Every target defined in `dir` and the directories below it.
function(moe_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    moe_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(moe_write_link_closures file)
  set(text "")
  foreach(target IN LISTS ARGN)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "UTILITY")
      continue()
    endif()
    moe_link_closure(${target} libs)
    list(JOIN libs " " line)
    string(APPEND text "${target}: ${line}\n")
  endforeach()
  file(GENERATE OUTPUT ${file} CONTENT "${text}")
endfunction()
