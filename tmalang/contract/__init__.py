"""The launch contract: what a compiled kernel asks of its caller, as plain data.

`manifest` is written by the compiler (its arguments, PTX parameters, grid, shared memory) and
read by everything that runs a kernel; `binding` checks host or device arrays and scalars
against it (through `arrays`, `view`, `dlpack`) and raises the located `LaunchError`s of
`errors`. It sits below both the runtime (which launches on a GPU) and the interpreter (which
runs the same launch on the CPU), so both accept exactly the same calls.
"""
