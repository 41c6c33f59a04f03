#include "gateway/exec/shim.h"

int main(int argc, char** argv) { return fedgate::gateway::ShimMain(argc, argv); }
