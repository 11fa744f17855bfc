// A host program a C++ user writes against `tmalangc examples/saxpy.tma --emit header`:
// load the cubin, copy x and y in, launch saxpy_launch, copy out back.
//   saxpy_host CUBIN M N A X.bin Y.bin OUT.bin      (f32, row-major, rows padded to 16 bytes)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "saxpy.h"

static bool ok(CUresult code, const char* what) {
  if (code == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(code, &name);
  std::fprintf(stderr, "%s: %s\n", what, name ? name : "?");
  return false;
}

static std::vector<char> slurp(const char* path) {
  std::vector<char> bytes;
  if (FILE* f = std::fopen(path, "rb")) {
    char chunk[1 << 16];
    for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.insert(bytes.end(), chunk, chunk + n);
    std::fclose(f);
  }
  return bytes;
}

int main(int argc, char** argv) {
  if (argc != 8) return 2;
  const uint64_t m = std::strtoull(argv[2], nullptr, 10), n = std::strtoull(argv[3], nullptr, 10);
  const uint64_t pitch = (n + 3) / 4 * 4 * sizeof(float), bytes = m * pitch;
  std::vector<char> cubin = slurp(argv[1]), x = slurp(argv[5]), y = slurp(argv[6]);
  if (cubin.empty() || x.size() != bytes || y.size() != bytes) return 3;
  CUdevice device;
  CUcontext context;
  CUmodule module;
  CUfunction function;
  CUdeviceptr dx, dy, dout;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&context, device), "retain") || !ok(cuCtxSetCurrent(context), "ctx") ||
      !ok(cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData") ||
      !ok(cuModuleGetFunction(&function, module, "saxpy"), "cuModuleGetFunction") ||
      !ok(cuMemAlloc(&dx, bytes), "alloc") || !ok(cuMemAlloc(&dy, bytes), "alloc") ||
      !ok(cuMemAlloc(&dout, bytes), "alloc") || !ok(cuMemcpyHtoD(dx, x.data(), bytes), "copy x") ||
      !ok(cuMemcpyHtoD(dy, y.data(), bytes), "copy y"))
    return 4;
  auto tensor = [&](CUdeviceptr data) {
    tmalang::Tensor t;
    t.data = data;
    t.rank = 2;
    t.shape[0] = m, t.shape[1] = n;
    t.strides[0] = pitch, t.strides[1] = sizeof(float);
    return t;
  };
  saxpy_args args{std::strtof(argv[4], nullptr), tensor(dx), tensor(dy), tensor(dout)};
  if (tmalang::Error e = saxpy_launch(function, args, nullptr)) {
    std::fprintf(stderr, "saxpy_launch: %s\n", e.message);
    return 5;
  }
  std::vector<char> out(bytes);
  if (!ok(cuCtxSynchronize(), "sync") || !ok(cuMemcpyDtoH(out.data(), dout, bytes), "copy out")) return 6;
  FILE* f = std::fopen(argv[7], "wb");
  if (!f || std::fwrite(out.data(), 1, bytes, f) != bytes) return 7;
  std::fclose(f);
  return 0;
}
