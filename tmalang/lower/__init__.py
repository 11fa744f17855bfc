"""Lowering: the checked AST (sema's KernelInfo) becomes high-level IR.

The one stage that sees both the front end (syntax/, sema/) and the IR (ir/), so that ir/ stays
a data layer that passes, the interpreter and the backend share without knowing the language.
"""

from .kernel import lower_kernel

__all__ = ["lower_kernel"]
