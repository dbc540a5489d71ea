# Where libdmuon.so and dmuonc are, relative to this package's folder and as
# absolute paths. The build writes its own copy of this file into the
# package folders it makes (the build tree's and the installed one); in the
# source tree nothing is known, and the library is found through
# DMUON_LIBRARY or the loader's search path.
LIBRARY_RELATIVE = ""
LIBRARY_ABSOLUTE = ""
DMUONC_RELATIVE = ""
DMUONC_ABSOLUTE = ""
