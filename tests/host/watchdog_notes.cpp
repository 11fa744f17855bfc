// watchdog_notes.cpp — how the C++ runtime words a reported wait (tests/test_cpp_watchdog.py): for
// each line of stdin, "site cta_x cta_y cta_z cluster_rank warp offset parity phase_parity", the
// note tmalang_runtime.h writes for that entry of kernel KERNEL (kernel.h, compiled with the
// watchdog), one a line, to compare word for word with the Python runtime's. Needs no driver.
// Built with -DKERNEL=<kernel>.
#include <cstdio>
#include <iostream>

#include "kernel.h"

#define PASTE(a, b) a##b
#define NAME(kernel, suffix) PASTE(kernel, suffix)

int main() {
  tmalang::detail::Entry e{};
  while (std::cin >> e.site >> e.cta_x >> e.cta_y >> e.cta_z >> e.cluster_rank >> e.warp >> e.offset >> e.parity >>
         e.phase_parity)
    std::printf("%s\n", tmalang::detail::describe(NAME(KERNEL, _watchdog), e).c_str());
  return 0;
}
