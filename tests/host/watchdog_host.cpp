// watchdog_host.cpp — a host program over two launch headers (tests/runtime/test_cpp_watchdog.py): hang.h,
// of a kernel HANG compiled with the watchdog whose waits never complete, and copy.h, of a healthy
// kernel COPY; both take (src: f32[M, N], dst: f32[M, N]). It hangs HANG three times and prints
// each report: twice through tmalang::synchronize (the second report shows that the first one
// re-armed the module), once through the next HANG launch after a plain cuStreamSynchronize.
// Then, in the same process and context, COPY copies src to dst, which goes to OUT.
//   watchdog_host M N HANG_CUBIN COPY_CUBIN OUT        (HANG_CUBIN is ignored with -DHANG_EMBEDDED)
// Built with -DHANG=<kernel> -DCOPY=<kernel> [-DHANG_EMBEDDED: HANG's header embeds its cubin].
// A report goes to stdout as "report N: code C" and the error's text; any other failure exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "copy.h"
#include "hang.h"
#include "host_io.h"

#define PASTE(a, b) a##b
#define NAME(kernel, suffix) PASTE(kernel, suffix)

namespace {

void print_report(int round, const tmalang::Error& e) {
  if (!e) host::die("round " + std::to_string(round) + ": the hanging kernel gave no report");
  std::printf("report %d: code %d\n%s\n", round, int(e.code), e.text().c_str());
  std::fflush(stdout);
}

tmalang::Tensor matrix(CUdeviceptr data, uint64_t m, uint64_t n, uint64_t pitch) {
  tmalang::Tensor t;
  t.data = data;
  t.rank = 2;
  t.shape[0] = m, t.shape[1] = n;
  t.strides[0] = pitch, t.strides[1] = sizeof(float);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) host::die("usage: watchdog_host M N HANG_CUBIN COPY_CUBIN OUT");
  const uint64_t m = std::strtoull(argv[1], nullptr, 10), n = std::strtoull(argv[2], nullptr, 10);
  const uint64_t pitch = (n + 3) / 4 * 4 * sizeof(float), bytes = m * pitch;
  CUstream stream = host::start();
  CUmodule hang_module, copy_module;
  CUfunction hang, copy;
#ifdef HANG_EMBEDDED
  host::check(NAME(HANG, _load)(&hang_module, &hang), "loading the hanging kernel");
#else
  host::check(NAME(HANG, _load_file)(argv[3], &hang_module, &hang), "loading the hanging kernel");
#endif
  host::check(NAME(COPY, _load_file)(argv[4], &copy_module, &copy), "loading the copy kernel");

  std::vector<float> values(bytes / sizeof(float)), zeros(values.size(), 0.0f);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 1000) * 0.25f - 7.0f;
  CUdeviceptr src, dst;
  host::check(cuMemAlloc(&src, bytes), "cuMemAlloc");
  host::check(cuMemAlloc(&dst, bytes), "cuMemAlloc");
  host::check(cuMemcpyHtoD(src, values.data(), bytes), "cuMemcpyHtoD");
  const tmalang::Tensor a = matrix(src, m, n, pitch), b = matrix(dst, m, n, pitch);

  for (int round = 0; round < 2; ++round) {
    host::check(cuMemcpyHtoD(dst, zeros.data(), bytes), "cuMemcpyHtoD");
    host::check(NAME(HANG, _launch)(hang, NAME(HANG, _args){a, b}, stream), "launching the hanging kernel");
    print_report(round, tmalang::synchronize(stream));
  }
  // a program that waits with the driver alone hears of the hang at the kernel's next launch
  host::check(NAME(HANG, _launch)(hang, NAME(HANG, _args){a, b}, stream), "launching the hanging kernel");
  host::check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  print_report(2, NAME(HANG, _launch)(hang, NAME(HANG, _args){a, b}, stream));
  host::check(tmalang::watchdog_check(), "the watchdog's record after a report");

  host::check(cuMemcpyHtoD(dst, zeros.data(), bytes), "cuMemcpyHtoD");
  host::check(NAME(COPY, _launch)(copy, NAME(COPY, _args){a, b}, stream), "launching the copy");
  host::check(tmalang::synchronize(stream), "synchronizing the copy");
  std::vector<char> out(bytes);
  host::check(cuMemcpyDtoH(out.data(), dst, bytes), "cuMemcpyDtoH");
  host::write_file(argv[5], out);
  host::check(tmalang::unload(hang_module), "unloading the hanging kernel");
  host::check(tmalang::unload(copy_module), "unloading the copy kernel");
  return 0;
}
