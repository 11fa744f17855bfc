"""Hand-written PTX that asks the H100's TMA unit what it does, independently of our compiler.

`landed_bytes` arms one mbarrier per CTA with a different expect_tx (16, 32, ... bytes), issues
the same 2-D tensor load in every CTA and reports which phases completed within 3 ms: a phase
completes only when the bytes armed equal the bytes that land, or fewer, so the largest
completing count is what the load delivers. It also returns the shared memory the load wrote.
`store_box` stores a known pattern through a tensor map and returns the global array.
Used by tests/gpu/test_interp_vs_h100.py to pin the hardware facts that sema and the interpreter
encode (e.g. that the innermost element stride is ignored).
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

_PTX = r"""
.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];

.visible .entry probe_load(.param .align 64 .b8 tmap[128], .param .u64 out_ptr, .param .u64 res_ptr,
    .param .u32 cx, .param .u32 cy, .param .u32 nwords, .param .u32 cbase, .param .u32 cstep)
{
  .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .pred %p<10>;
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x;
  ld.param.u32 %r3, [nwords];
  mov.u32 %r10, smem;            // the barrier at +0, the data at +1024
  add.u32 %r11, %r10, 1024;
  mov.u32 %r4, %r1;
FILL: setp.ge.u32 %p1, %r4, %r3; @%p1 bra FILLED;
  shl.b32 %r5, %r4, 2; add.u32 %r5, %r5, %r11; st.shared.u32 [%r5], 0xDEADBEEF;
  add.u32 %r4, %r4, 128; bra FILL;
FILLED:
  fence.proxy.async.shared::cta;
  setp.ne.u32 %p2, %r1, 0;
  @%p2 bra INITED;
  mbarrier.init.shared::cta.b64 [%r10], 1;
  fence.mbarrier_init.release.cluster;
INITED:
  bar.sync 0;
  @%p2 bra POLLED;
  ld.param.u32 %r6, [cbase]; ld.param.u32 %r7, [cstep];
  mad.lo.u32 %r8, %r2, %r7, %r6;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], %r8;
  mov.b64 %rd1, tmap; cvta.param.u64 %rd2, %rd1;
  ld.param.u32 %r12, [cx]; ld.param.u32 %r13, [cy];
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r11], [%rd2, {%r12, %r13}], [%r10];
  mov.u64 %rd3, %globaltimer;
POLL:
  { .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%r10], 0; selp.b32 %r20, 1, 0, q; }
  setp.ne.u32 %p3, %r20, 0; @%p3 bra DONE;
  mov.u64 %rd4, %globaltimer; sub.u64 %rd5, %rd4, %rd3; setp.lt.u64 %p4, %rd5, 3000000; @%p4 bra POLL;
DONE:
  ld.param.u64 %rd6, [res_ptr]; cvta.to.global.u64 %rd6, %rd6;
  mul.wide.u32 %rd7, %r2, 4; add.u64 %rd6, %rd6, %rd7; st.global.u32 [%rd6], %r20;
POLLED:
  bar.sync 0;
  ld.param.u64 %rd8, [out_ptr]; cvta.to.global.u64 %rd8, %rd8;
  mul.wide.u32 %rd9, %r2, %r3; shl.b64 %rd9, %rd9, 2; add.u64 %rd8, %rd8, %rd9;
  mov.u32 %r4, %r1;
COPY: setp.ge.u32 %p1, %r4, %r3; @%p1 bra COPIED;
  shl.b32 %r5, %r4, 2; add.u32 %r14, %r5, %r11; ld.shared.u32 %r15, [%r14];
  cvt.u64.u32 %rd10, %r5; add.u64 %rd11, %rd8, %rd10; st.global.u32 [%rd11], %r15;
  add.u32 %r4, %r4, 128; bra COPY;
COPIED:
  ret;
}

.visible .entry probe_store(.param .align 64 .b8 tmap[128], .param .u64 src_ptr,
    .param .u32 cx, .param .u32 cy, .param .u32 nwords)
{
  .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .pred %p<10>;
  mov.u32 %r1, %tid.x;
  ld.param.u32 %r3, [nwords];
  mov.u32 %r10, smem; add.u32 %r11, %r10, 1024;
  ld.param.u64 %rd8, [src_ptr]; cvta.to.global.u64 %rd8, %rd8;
  mov.u32 %r4, %r1;
COPY: setp.ge.u32 %p1, %r4, %r3; @%p1 bra COPIED;
  shl.b32 %r5, %r4, 2; cvt.u64.u32 %rd10, %r5; add.u64 %rd11, %rd8, %rd10; ld.global.u32 %r15, [%rd11];
  add.u32 %r14, %r5, %r11; st.shared.u32 [%r14], %r15;
  add.u32 %r4, %r4, 128; bra COPY;
COPIED:
  fence.proxy.async.shared::cta;
  bar.sync 0;
  setp.ne.u32 %p2, %r1, 0; @%p2 bra END;
  mov.b64 %rd1, tmap; cvta.param.u64 %rd2, %rd1;
  ld.param.u32 %r12, [cx]; ld.param.u32 %r13, [cy];
  cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd2, {%r12, %r13}], [%r11];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
END:
  ret;
}
"""

_SMEM = 1024 + 65536
_WORDS = 16384


class Probe:
    """The probe kernels, loaded once into torch's (the primary) context."""

    def __init__(self):
        import torch
        from cuda.bindings import driver as cu

        self.cu, self.torch = cu, torch
        torch.zeros(1, device="cuda")
        module = self._check(cu.cuModuleLoadData(_PTX.encode() + b"\0"))
        self.load_kernel = self._check(cu.cuModuleGetFunction(module, b"probe_load"))
        self.store_kernel = self._check(cu.cuModuleGetFunction(module, b"probe_store"))
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        for kernel in (self.load_kernel, self.store_kernel):
            self._check(cu.cuFuncSetAttribute(kernel, attribute, _SMEM))

    def _check(self, result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        assert err == self.cu.CUresult.CUDA_SUCCESS, err
        return rest[0] if len(rest) == 1 else rest

    def _tensor_map(self, t, box, strides) -> ctypes.Array:
        cu = self.cu
        kind = {1: "UINT8", 2: "UINT16", 4: "UINT32"}[t.element_size()]
        tensor_map = self._check(cu.cuTensorMapEncodeTiled(
            getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kind}"), 2, t.data_ptr(),
            [cu.cuuint64_t(t.shape[1]), cu.cuuint64_t(t.shape[0])], [cu.cuuint64_t(t.stride(0) * t.element_size())],
            [cu.cuuint32_t(box[1]), cu.cuuint32_t(box[0])], [cu.cuuint32_t(strides[1]), cu.cuuint32_t(strides[0])],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        raw = struct.pack("<16Q", *(int(word) for word in tensor_map.opaque))
        return (ctypes.c_ubyte * 128).from_buffer_copy(raw)

    def _launch(self, kernel, ctas: int, args: list) -> None:
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self._check(self.cu.cuLaunchKernel(kernel, ctas, 1, 1, 128, 1, 1, _SMEM, 0, ctypes.addressof(pointers), 0))
        self._check(self.cu.cuCtxSynchronize())

    def landed_bytes(self, tensor: np.ndarray, box, strides, at) -> tuple[int, np.ndarray]:
        """(bytes the load completes on its barrier, the smem it wrote as tensor.dtype elements)."""
        torch = self.torch
        t = torch.from_numpy(tensor.view(np.uint32) if tensor.itemsize == 4 else tensor.view(np.uint16)).cuda()
        full = box[0] * box[1] * tensor.itemsize
        counts = list(range(16, full + 1024, 16))
        out = torch.zeros(len(counts) * _WORDS, dtype=torch.int32, device="cuda")
        done = torch.zeros(len(counts), dtype=torch.int32, device="cuda")
        self._launch(self.load_kernel, len(counts), [
            self._tensor_map(t, box, strides), ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(done.data_ptr()),
            ctypes.c_uint32(at[1]), ctypes.c_uint32(at[0]), ctypes.c_uint32(_WORDS), ctypes.c_uint32(16),
            ctypes.c_uint32(16)])
        landed = max(c for c, d in zip(counts, done.cpu().numpy()) if d)
        i = counts.index(landed)
        words = out.cpu().numpy()[i * _WORDS:(i + 1) * _WORDS]
        return landed, words.view(tensor.dtype)[: landed // tensor.itemsize]

    def store_box(self, pattern: np.ndarray, target: np.ndarray, box, strides, at) -> np.ndarray:
        """`target` after storing the smem tile `pattern` (dense, target's dtype) at element `at`."""
        torch = self.torch
        words = np.zeros(_WORDS, dtype=np.uint32)
        words.view(pattern.dtype)[: pattern.size] = pattern.ravel()
        source = torch.from_numpy(words.view(np.int32)).cuda()
        g = torch.from_numpy(target.view(np.int32) if target.itemsize == 4 else target.view(np.int16)).cuda()
        self._launch(self.store_kernel, 1, [
            self._tensor_map(g, box, strides), ctypes.c_uint64(source.data_ptr()),
            ctypes.c_uint32(at[1]), ctypes.c_uint32(at[0]), ctypes.c_uint32(_WORDS)])
        return g.cpu().numpy().view(target.dtype)
