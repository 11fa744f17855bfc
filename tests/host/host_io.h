// host_io.h — what the host programs of tests/host/generate.py share. A test describes one run
// in spec.txt (written by generate.write_run): the launch count, every tensor (shape, byte
// strides, buffer size, whether the kernel writes it) and every scalar (its bytes in hex). The
// program fills device buffers from NAME.in, launches through the kernel's generated header and
// writes each written tensor's buffer to NAME.out. Any failure prints why and exits with 1.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tmalang_runtime.h"

namespace host {

[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::exit(1);
}

inline void check(CUresult code, const char* call) {
  if (tmalang::Error e = tmalang::check(code, call)) die(e.message);
}

inline void check(const tmalang::Error& e, const char* call) {
  if (e) die(std::string(call) + ": " + e.text());
}

// One tensor argument: its description, its initial bytes (NAME.in) and its device buffer.
struct Buffer {
  tmalang::Tensor tensor;
  uint64_t bytes = 0;
  bool written = false;
  std::vector<char> initial;
};

struct Run {
  int launches = 1;
  std::map<std::string, Buffer> tensors;
  std::map<std::string, std::vector<unsigned char>> scalars;
};

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot open " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) die("cannot write " + path);
}

// `tensor NAME RANK SHAPE... STRIDES... BYTES WRITTEN`, the initial bytes read from NAME.in.
inline void read_tensor(std::istringstream& line, Run& run) {
  std::string name;
  Buffer b;
  line >> name >> b.tensor.rank;
  if (!line || b.tensor.rank < 1 || b.tensor.rank > 5) die("bad tensor line for " + name);
  for (int d = 0; d < b.tensor.rank; ++d) line >> b.tensor.shape[d];
  for (int d = 0; d < b.tensor.rank; ++d) line >> b.tensor.strides[d];
  line >> b.bytes >> b.written;
  if (!line) die("bad tensor line for " + name);
  b.initial = read_file(name + ".in");
  if (b.initial.size() != b.bytes) die(name + ".in does not hold the tensor's bytes");
  run.tensors[name] = std::move(b);
}

// `scalar NAME HEX`: the scalar's bytes as the kernel takes them (little-endian).
inline void read_scalar(std::istringstream& line, Run& run) {
  std::string name, hex;
  line >> name >> hex;
  if (!line || hex.size() % 2) die("bad scalar line for " + name);
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i < hex.size(); i += 2) bytes.push_back((unsigned char)std::stoul(hex.substr(i, 2), nullptr, 16));
  run.scalars[name] = bytes;
}

inline Run read_run(const char* spec) {
  std::ifstream in(spec);
  if (!in) die(std::string("cannot open ") + spec);
  Run run;
  for (std::string text; std::getline(in, text);) {
    std::istringstream line(text);
    std::string kind;
    if (!(line >> kind)) continue;
    if (kind == "launches") line >> run.launches;
    else if (kind == "tensor") read_tensor(line, run);
    else if (kind == "scalar") read_scalar(line, run);
    else die("unknown spec line: " + text);
  }
  return run;
}

// Device 0's primary context, current on this thread, and a non-blocking stream: the launches,
// uploads and downloads all go on it, so the run tests a launch on a stream that is not the
// legacy default.
inline CUstream start() {
  CUdevice device;
  CUcontext context;
  CUstream stream;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return stream;
}

// A device buffer for every tensor; their addresses go into the tensors' descriptions.
inline void allocate(Run& run) {
  for (auto& [name, b] : run.tensors) check(cuMemAlloc(&b.tensor.data, b.bytes), "cuMemAlloc");
}

// Every tensor back to its initial bytes, ordered on `stream` before the next launch.
inline void upload(Run& run, CUstream stream) {
  for (auto& [name, b] : run.tensors)
    check(cuMemcpyHtoDAsync(b.tensor.data, b.initial.data(), b.bytes, stream), "cuMemcpyHtoDAsync");
}

// Waits for the launches, then writes every written tensor's buffer to NAME.out.
inline void download(Run& run, CUstream stream) {
  check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  for (auto& [name, b] : run.tensors) {
    if (!b.written) continue;
    std::vector<char> bytes(b.bytes);
    check(cuMemcpyDtoH(bytes.data(), b.tensor.data, b.bytes), "cuMemcpyDtoH");
    write_file(name + ".out", bytes);
  }
}

inline tmalang::Tensor tensor(const Run& run, const char* name, int rank) {
  auto found = run.tensors.find(name);
  if (found == run.tensors.end()) die(std::string("the spec has no tensor ") + name);
  if (found->second.tensor.rank != rank) die(std::string("tensor ") + name + " has the wrong rank");
  return found->second.tensor;
}

template <class T>
T scalar(const Run& run, const char* name) {
  auto found = run.scalars.find(name);
  if (found == run.scalars.end()) die(std::string("the spec has no scalar ") + name);
  if (found->second.size() != sizeof(T)) die(std::string("scalar ") + name + " has the wrong size");
  T value;
  std::memcpy(&value, found->second.data(), sizeof value);
  return value;
}

}  // namespace host
