"""The compile's stages by name, in order (compiler.py's docstring says what each makes): the one
vocabulary of `compile_source(until=...)`, `tmalangc --emit`, `--time-passes` and the caches.
compiler.py binds each name to the function that runs it; this module imports nothing, so the
command line's front reads it without loading the compiler.
"""

NAMES = ("ast", "sema", "lower", "ir", "ll", "ptx", "cubin")
PRINTED = ("ast", "ir", "ll", "ptx", "cubin")   # the stages whose artifact `--emit` writes
FROM_IR = ("ll", "ptx", "cubin")                # what `--emit` makes from final IR text (K.ir)
