// mock_cuda.cpp — a stand-in for the driver library, so that host programs built against a
// launch header run on a machine without a GPU (tests/runtime/test_cpp_host.py). Device memory is host
// memory and kernels do not run; what the header asks of the driver is written to $MOCK_LOG, one
// JSON object a line: the loaded image and entry, every tensor-map encode with its arguments,
// the tile counter it allocates and every launch (grid, block, shared memory, cluster and the
// parameter bytes, whose sizes $MOCK_PARAM_SIZES gives, comma-separated, in PTX order). The
// test compares them with what the Python runtime computes for the same arguments.
// The device: compute capability $MOCK_CC_MAJOR.0, 132 multiprocessors, one resident CTA each.
// Built as its own shared library (not named libcuda), so a real libcuda on the library path
// cannot take its place.
//
// The watchdog (tests/runtime/test_cpp_watchdog.py): every module has a global named $MOCK_WATCHDOG_GLOBAL
// of $MOCK_WATCHDOG_GLOBAL_BYTES bytes (none without them). The pinned record the header
// allocates is logged, with the address a kernel would see it at (not its host address), and so
// is every write to a module's global. A launch of a kernel whose module global was armed logs
// the global and whether the record is all zeros; a launch of the kernel named
// $MOCK_WATCHDOG_KERNEL then plays a watchdog that fired: it claims an entry of the record for each
// of $MOCK_WATCHDOG_REPORT (entries separated by ';', each its u32 words separated by ','), writes
// it there (one claimed past the record's end is dropped, as the kernel drops it) and raises
// `stop`. $MOCK_WATCHDOG_FIELDS gives the byte offsets of the global's record, claimed and stop
// fields, comma-separated. The mock knows no layout of its own: the test passes
// tmalang/contract/watchdog.py's.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kMultiprocessors = 132;

FILE* log_file() {
  static FILE* file = std::fopen(std::getenv("MOCK_LOG"), "w");
  return file;
}

template <class T>
std::string json_list(const T* values, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

std::string hex(const void* data, size_t size) {
  std::string text;
  char byte[3];
  for (size_t i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<const unsigned char*>(data)[i]);
    text += byte;
  }
  return text;
}

// The size of an ELF64 image: its section and program header tables end it (a cubin's layout).
size_t elf_size(const unsigned char* image) {
  uint64_t sections, programs;
  uint16_t section_size, section_count, program_size, program_count;
  std::memcpy(&programs, image + 0x20, 8);
  std::memcpy(&sections, image + 0x28, 8);
  std::memcpy(&program_size, image + 0x36, 2);
  std::memcpy(&program_count, image + 0x38, 2);
  std::memcpy(&section_size, image + 0x3a, 2);
  std::memcpy(&section_count, image + 0x3c, 2);
  uint64_t end = sections + uint64_t(section_size) * section_count;
  uint64_t program_end = programs + uint64_t(program_size) * program_count;
  return size_t(end > program_end ? end : program_end);
}

uint64_t fnv1a(const unsigned char* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 0x100000001b3ull;
  return hash;
}

// ---- modules, functions and the watchdog's memory ----

// Pinned memory appears to kernels this far from its host address, so that a header that gives
// a kernel the host address instead of the mapped one is caught.
constexpr uintptr_t kMappedOffset = uintptr_t(1) << 44;

struct Module {
  std::vector<unsigned char> global;   // the watchdog global, or empty
  bool armed = false;                  // the header wrote it
};

struct Function {
  std::string name;
  int module;
};

std::vector<Module> modules;         // a CUmodule is 1 + its index
std::vector<Function> functions;     // a CUfunction is 0x10000 + its index
std::map<uintptr_t, size_t> pinned;  // host address -> bytes

Module& module_of(CUmodule handle) { return modules.at(reinterpret_cast<uintptr_t>(handle) - 1); }
Function& function_of(CUfunction handle) { return functions.at(reinterpret_cast<uintptr_t>(handle) - 0x10000); }

std::vector<size_t> numbers(const char* text, char separator) {
  std::vector<size_t> values;
  std::stringstream in(text ? text : "");
  for (std::string item; std::getline(in, item, separator);) values.push_back(std::stoul(item, nullptr, 0));
  return values;
}

template <class T>
T* field(Module& module, size_t at) {
  return reinterpret_cast<T*>(module.global.data() + at);
}

// The pinned record a kernel reaches at `mapped`, or null.
uint32_t* record_at(uint64_t mapped) {
  uintptr_t host = uintptr_t(mapped) - kMappedOffset;
  return pinned.count(host) ? reinterpret_cast<uint32_t*>(host) : nullptr;
}

bool all_zero(const uint32_t* record) {
  for (size_t i = 0; i < pinned[reinterpret_cast<uintptr_t>(record)] / 4; ++i)
    if (record[i] != 0) return false;
  return true;
}

// A watched kernel's launch: log its global, then, for the chosen kernel, fire as its watchdog would.
void watchdog_launch(Module& module, const Function& function) {
  std::vector<size_t> at = numbers(std::getenv("MOCK_WATCHDOG_FIELDS"), ',');   // record, claimed, stop
  uint32_t* record = record_at(*field<uint64_t>(module, at.at(0)));
  std::fprintf(log_file(), "{\"watchdog\": {\"global\": \"%s\", \"record_zero\": %s}}\n",
               hex(module.global.data(), module.global.size()).c_str(), record && all_zero(record) ? "true" : "false");
  const char* kernel = std::getenv("MOCK_WATCHDOG_KERNEL");
  if (record == nullptr || kernel == nullptr || function.name != kernel) return;
  std::stringstream entries(std::getenv("MOCK_WATCHDOG_REPORT"));
  for (std::string entry; std::getline(entries, entry, ';');) {
    std::vector<size_t> words = numbers(entry.c_str(), ',');
    uint32_t index = (*field<uint32_t>(module, at.at(1)))++;
    if ((index + 1) * words.size() * 4 > pinned[reinterpret_cast<uintptr_t>(record)]) continue;   // full
    for (size_t i = 0; i < words.size(); ++i) record[index * words.size() + i] = uint32_t(words[i]);
  }
  *field<uint32_t>(module, at.at(2)) = 1;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuGetErrorName(CUresult, const char** name) {
  *name = "MOCK_ERROR";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(0x1000);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  *context = reinterpret_cast<CUcontext>(0x1000);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetId(CUcontext, unsigned long long* id) {
  *id = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? std::atoi(std::getenv("MOCK_CC_MAJOR"))
           : attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT   ? kMultiprocessors
                                                                     : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned) {
  *stream = reinterpret_cast<CUstream>(0x2000);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  const unsigned char* bytes = static_cast<const unsigned char*>(image);
  if (std::memcmp(bytes, "\x7f" "ELF", 4) != 0) return CUDA_ERROR_INVALID_IMAGE;
  size_t size = elf_size(bytes);
  std::fprintf(log_file(), "{\"image\": {\"size\": %zu, \"fnv1a\": %llu}}\n", size,
               static_cast<unsigned long long>(fnv1a(bytes, size)));
  Module loaded;
  if (const char* bytes = std::getenv("MOCK_WATCHDOG_GLOBAL_BYTES")) loaded.global.assign(std::stoul(bytes), 0xab);
  modules.push_back(loaded);
  *module = reinterpret_cast<CUmodule>(uintptr_t(modules.size()));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  std::fprintf(log_file(), "{\"unload\": %llu}\n", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(module)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  std::fprintf(log_file(), "{\"entry\": \"%s\"}\n", name);
  functions.push_back({name, int(reinterpret_cast<uintptr_t>(module))});
  *function = reinterpret_cast<CUfunction>(uintptr_t(0x10000 + functions.size() - 1));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetModule(CUmodule* module, CUfunction function) {
  *module = reinterpret_cast<CUmodule>(uintptr_t(function_of(function).module));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr* pointer, size_t* size, CUmodule module, const char* name) {
  const char* watchdog = std::getenv("MOCK_WATCHDOG_GLOBAL");
  Module& m = module_of(module);
  if (watchdog == nullptr || std::strcmp(name, watchdog) != 0 || m.global.empty()) return CUDA_ERROR_NOT_FOUND;
  *pointer = reinterpret_cast<CUdeviceptr>(m.global.data());
  *size = m.global.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* pointer, size_t size) {
  void* memory = std::aligned_alloc(256, (size + 255) / 256 * 256);
  std::memset(memory, 0xab, size);
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr pointer) {
  std::free(reinterpret_cast<void*>(pointer));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr pointer, unsigned value, size_t count, CUstream) {
  for (size_t i = 0; i < count; ++i) reinterpret_cast<unsigned*>(pointer)[i] = value;
  std::fprintf(log_file(), "{\"counter\": %llu}\n", static_cast<unsigned long long>(pointer));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr device, const void* host, size_t size, CUstream) {
  std::memcpy(reinterpret_cast<void*>(device), host, size);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoH(void* host, CUdeviceptr device, size_t size) {
  std::memcpy(host, reinterpret_cast<const void*>(device), size);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr device, const void* host, size_t size) {
  std::memcpy(reinterpret_cast<void*>(device), host, size);
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i].global.empty() || reinterpret_cast<CUdeviceptr>(modules[i].global.data()) != device) continue;
    modules[i].armed = true;
    std::fprintf(log_file(), "{\"global_write\": {\"module\": %zu, \"bytes\": \"%s\"}}\n", i + 1,
                 hex(host, size).c_str());
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostAlloc(void** pointer, size_t size, unsigned flags) {
  *pointer = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  std::memset(*pointer, 0xab, size);   // the header must zero it
  pinned[reinterpret_cast<uintptr_t>(*pointer)] = size;
  std::fprintf(log_file(), "{\"host_alloc\": {\"bytes\": %zu, \"devicemap\": %s, \"portable\": %s}}\n", size,
               flags & CU_MEMHOSTALLOC_DEVICEMAP ? "true" : "false", flags & CU_MEMHOSTALLOC_PORTABLE ? "true" : "false");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFreeHost(void* pointer) {
  pinned.erase(reinterpret_cast<uintptr_t>(pointer));
  std::free(pointer);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr* device, void* host, unsigned) {
  if (!pinned.count(reinterpret_cast<uintptr_t>(host))) return CUDA_ERROR_INVALID_VALUE;
  *device = CUdeviceptr(reinterpret_cast<uintptr_t>(host) + kMappedOffset);
  std::fprintf(log_file(), "{\"mapped\": %llu}\n", static_cast<unsigned long long>(*device));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamQuery(CUstream) { return CUDA_SUCCESS; }   // kernels end at once here

CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction, int, size_t) {
  *blocks = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* clusters, CUfunction, const CUlaunchConfig* config) {
  *clusters = kMultiprocessors / int(config->attrs[0].value.clusterDim.x);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob) {
  std::fprintf(log_file(),
               "{\"tiled\": {\"dtype\": %d, \"rank\": %u, \"dims\": %s, \"strides\": %s, \"box\": %s, "
               "\"element_strides\": %s, \"interleave\": %d, \"swizzle\": %d, \"l2\": %d, \"oob\": %d}}\n",
               int(dtype), rank, json_list(dims, int(rank)).c_str(), json_list(strides, int(rank) - 1).c_str(),
               json_list(box, int(rank)).c_str(), json_list(element_strides, int(rank)).c_str(), int(interleave),
               int(swizzle), int(l2), int(oob));
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &address, sizeof address);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
                                         const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                         const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                         const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill oob) {
  std::fprintf(log_file(),
               "{\"im2col\": {\"dtype\": %d, \"rank\": %u, \"dims\": %s, \"strides\": %s, \"lower\": %s, "
               "\"upper\": %s, \"channels\": %u, \"pixels\": %u, \"element_strides\": %s, \"interleave\": %d, "
               "\"swizzle\": %d, \"l2\": %d, \"oob\": %d}}\n",
               int(dtype), rank, json_list(dims, int(rank)).c_str(), json_list(strides, int(rank) - 1).c_str(),
               json_list(lower, int(rank) - 2).c_str(), json_list(upper, int(rank) - 2).c_str(), channels, pixels,
               json_list(element_strides, int(rank)).c_str(), int(interleave), int(swizzle), int(l2), int(oob));
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &address, sizeof address);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction function, void** params, void**) {
  const char* param_sizes = std::getenv("MOCK_PARAM_SIZES");
  std::string sizes = param_sizes ? param_sizes : "", values;
  size_t index = 0;
  for (size_t start = 0; start < sizes.size(); ++index) {
    size_t end = sizes.find(',', start);
    if (end == std::string::npos) end = sizes.size();
    values += std::string(index ? ", " : "") + "\"" + hex(params[index], std::stoul(sizes.substr(start, end - start))) + "\"";
    start = end + 1;
  }
  unsigned cluster = 1, overlap = 0;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config->attrs[i];
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) cluster = attribute.value.clusterDim.x;
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      overlap = attribute.value.programmaticStreamSerializationAllowed;
  }
  std::fprintf(log_file(),
               "{\"launch\": {\"grid\": %u, \"block\": %u, \"smem\": %u, \"cluster\": %u, \"overlap_prior\": %u, "
               "\"params\": [%s]}}\n",
               config->gridDimX, config->blockDimX, config->sharedMemBytes, cluster, overlap, values.c_str());
  Module& module = module_of(reinterpret_cast<CUmodule>(uintptr_t(function_of(function).module)));
  if (module.armed) watchdog_launch(module, function_of(function));
  std::fflush(log_file());
  return CUDA_SUCCESS;
}

}  // extern "C"
