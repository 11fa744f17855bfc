"""The bottom layer: facts about the hardware that every stage shares, defined once.

    arch.py      Target: one entry per supported architecture (name, PTX version, shared memory
                 per CTA, cluster sizes, wgmma / tcgen05 / Tensor Memory), and `target_named`
    dtypes.py    element types with their NumPy, PyTorch, DLPack, tensor-map and C spellings
    tma.py       box options (swizzle, oob fill, L2 promotion) with their driver enums, TMA
                 limits and alignment, the bytes a box load writes
    wgmma/     the wgmma encodings: shared-memory descriptors, K-major tiles, instructions
    tcgen05/     the tcgen05 encodings: instruction and smem descriptors, Tensor Memory
                 addressing, instruction text

Nothing here imports the rest of tmalang except `diagnostics`: syntax, sema, ir, passes, the
interpreter, the backend and the runtime all stand on it.
"""
