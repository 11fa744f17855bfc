"""Blackwell fifth-generation tensor cores (tcgen05) and Tensor Memory: the encoding layer.

Plain integers and strings, no IR or LLVM, as for wgmma (targets/wgmma/):

* `descriptors`: the 32-bit instruction descriptor of `tcgen05.mma` and the sm_100 64-bit
  shared-memory matrix descriptor, with decoders, and the valid MMA shapes per kind;
* `tmem`: Tensor Memory addresses, allocation sizes and the accumulator layout in TMEM;
* `instructions`: the PTX text of alloc/dealloc/relinquish, mma, commit, ld/st/wait, cp and the
  thread-sync fences.

No Blackwell GPU is available to this project: every field is checked bit by bit against the
PTX ISA tables by tests/targets/test_tcgen05_encoding.py, and every instruction form is assembled by
ptxas for sm_100a.
"""
