// watchdog_notes.cpp — how the C++ runtime words a report's waits (tests/runtime/test_cpp_watchdog.py).
// Reads records from stdin, one entry a line, "tag site cta_x cta_y cta_z cluster_rank warp offset
// parity phase_parity", a blank line ending each record; writes the notes tmalang_runtime.h gives
// the record's waits (tag 1 is kernel KERNEL of kernel.h, compiled with the watchdog; any other
// tag is no armed kernel), one a line, and a blank line after each record, to compare word for
// word with the Python runtime's. Needs no driver.
// Built with -DKERNEL=<kernel> -DLISTED_RUNS=<runtime/watchdog.py's LISTED_RUNS>.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernel.h"

#define PASTE(a, b) a##b
#define NAME(kernel, suffix) PASTE(kernel, suffix)

static_assert(tmalang::detail::kListedRuns == LISTED_RUNS, "the header cuts CTA lists where Python does");

namespace {

const tmalang::Watched* kernel_of(uint32_t tag) { return tag == 1 ? &NAME(KERNEL, _watchdog) : nullptr; }

void print_notes(const std::vector<tmalang::detail::Entry>& record) {
  const auto known = tmalang::detail::known_entries(record, kernel_of);
  for (const std::string& note : tmalang::detail::wait_notes(known, kernel_of)) std::printf("%s\n", note.c_str());
  std::printf("\n");
}

}  // namespace

int main() {
  std::vector<tmalang::detail::Entry> record;
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) {
      print_notes(record);
      record.clear();
      continue;
    }
    std::istringstream words(line);
    tmalang::detail::Entry e{};
    words >> e.tag >> e.site >> e.cta_x >> e.cta_y >> e.cta_z >> e.cluster_rank >> e.warp >> e.offset >> e.parity >>
        e.phase_parity;
    if (!words) {
      std::fprintf(stderr, "not an entry: %s\n", line.c_str());
      return 1;
    }
    record.push_back(e);
  }
  if (!record.empty()) print_notes(record);
  return 0;
}
