// dmuonc: the dmuon planning compiler. Its options and run are in
// DmuoncMain.cpp, the planning itself in compiler/.
#include "DmuoncMain.h"

int main(int argc, char **argv) { return dmuon::dmuoncMain(argc, argv); }
