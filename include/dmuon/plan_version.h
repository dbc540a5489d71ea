// Version of the plan format written by dmuonc and accepted by libdmuon.
// See plan.fbs for the evolution rules.
#ifndef DMUON_PLAN_VERSION_H
#define DMUON_PLAN_VERSION_H

#define DMUON_PLAN_FORMAT_MAJOR 1
#define DMUON_PLAN_FORMAT_MINOR 2
#define DMUON_VERSION_STRING "0.1.0"

#endif
