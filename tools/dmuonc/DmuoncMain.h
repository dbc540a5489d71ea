// dmuonc as a library call, so the tool's main() is one line (as mlir-opt's
// MlirOptMain and iree-compile's runIreecMain).
#ifndef DMUON_TOOLS_DMUONC_DMUONCMAIN_H
#define DMUON_TOOLS_DMUONC_DMUONCMAIN_H

namespace dmuon {

// Parses the command line, plans, and writes the plan; returns the exit
// status (0, or 1 after printing "dmuonc: error: ...").
int dmuoncMain(int argc, char **argv);

} // namespace dmuon

#endif
