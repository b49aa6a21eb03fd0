# Writes ProfilePresets.inc: one {"name", R"json(...)json"} entry per
# profiles/*.json, so that presets work without the source tree at hand.
# Invoked as: cmake -DPROFILES_DIR=... -DOUTPUT=... -P EmbedProfiles.cmake
file(GLOB profiles "${PROFILES_DIR}/*.json")
list(SORT profiles)
set(content "// Generated from profiles/*.json by cmake/EmbedProfiles.cmake.\n")
foreach(profile ${profiles})
  get_filename_component(name "${profile}" NAME_WE)
  file(READ "${profile}" json)
  string(APPEND content "{\"${name}\", R\"moejson(${json})moejson\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "${content}")
configure_file("${OUTPUT}.tmp" "${OUTPUT}" COPYONLY)
