# dmuon_compile_plan(PLAN MANIFEST MESH [DMUONC_FLAGS...]): PLAN compiled at
# build time by this build's dmuonc from MANIFEST for --mesh MESH, the way
# the tests and examples that run plans get them.
function(dmuon_compile_plan plan manifest mesh)
  get_filename_component(_dir ${plan} DIRECTORY)
  get_filename_component(_input ${manifest} NAME)
  string(REPLACE ";" " " _flags "${ARGN}")
  add_custom_command(
    OUTPUT ${plan}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_dir}
    COMMAND $<TARGET_FILE:dmuonc> ${manifest} --mesh ${mesh} ${ARGN} -o ${plan}
    DEPENDS dmuonc ${manifest}
    COMMENT "dmuonc ${_input} --mesh ${mesh} ${_flags}"
    VERBATIM)
endfunction()
