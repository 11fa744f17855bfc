// mock_cuda.cpp — a stand-in for the driver library, so that host programs built against a
// launch header run on a machine without a GPU (tests/test_cpp_host.py). Device memory is host
// memory and kernels do not run; what the header asks of the driver is written to $MOCK_LOG, one
// JSON object a line: the loaded image and entry, every tensor-map encode with its arguments,
// the tile counter it allocates and every launch (grid, block, shared memory, cluster and the
// parameter bytes, whose sizes $MOCK_PARAM_SIZES gives, comma-separated, in PTX order). The
// test compares them with what the Python runtime computes for the same arguments.
// The device: compute capability $MOCK_CC_MAJOR.0, 132 multiprocessors, one resident CTA each.
// Built as its own shared library (not named libcuda), so a real libcuda on the library path
// cannot take its place.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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
  *module = reinterpret_cast<CUmodule>(0x3000);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule, const char* name) {
  std::fprintf(log_file(), "{\"entry\": \"%s\"}\n", name);
  *function = reinterpret_cast<CUfunction>(0x4000);
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

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void** params, void**) {
  std::string sizes = std::getenv("MOCK_PARAM_SIZES"), values;
  size_t index = 0;
  for (size_t start = 0; start < sizes.size(); ++index) {
    size_t end = sizes.find(',', start);
    if (end == std::string::npos) end = sizes.size();
    values += std::string(index ? ", " : "") + "\"" + hex(params[index], std::stoul(sizes.substr(start, end - start))) + "\"";
    start = end + 1;
  }
  unsigned cluster = config->numAttrs ? config->attrs[0].value.clusterDim.x : 1;
  std::fprintf(log_file(), "{\"launch\": {\"grid\": %u, \"block\": %u, \"smem\": %u, \"cluster\": %u, \"params\": [%s]}}\n",
               config->gridDimX, config->blockDimX, config->sharedMemBytes, cluster, values.c_str());
  std::fflush(log_file());
  return CUDA_SUCCESS;
}

}  // extern "C"
