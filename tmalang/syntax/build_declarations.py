"""The tree → AST builder's part for a kernel's header and declarations: the kernel with its
compile-time constants and parameters (shapes, dims), then grid, cluster and CTA-group choices,
boxes with their options, prefetches, assumptions, pipelines and their fields, shared and Tensor
Memory buffers, mbarriers and warp roles. Each method is named after its grammar rule
(grammar/tmalang.lark) and gets lark's children; syntax/parser.py's builder puts it together with
the statements' (syntax/build_statements.py) and expressions' (syntax/build_expressions.py)."""

from __future__ import annotations

import re

from lark import Token, v_args

from ..diagnostics import Source, Span
from . import ast
from .bindings import check_default
from .build_base import NodeBuilder


def _written(source: Source, span: Span, keyword: str) -> tuple[str, Span]:
    """A declaration's text after its keyword, as written (comments dropped, each run of whitespace
    one blank), and its span. lark ends a rule's span at its last token that is kept, so a closing
    parenthesis at the end (`assume C > (M)`) is taken back here, to quote and underline it."""
    text = source.text
    lines = text.split("\n")   # lark counts lines by \n
    def offset(line: int, col: int) -> int:
        return sum(len(x) + 1 for x in lines[:line - 1]) + col - 1
    start, end = offset(span.line, span.col) + len(keyword), offset(span.end_line, span.end_col)
    while text.count("(", start, end) > text.count(")", start, end) and ")" in text[end:]:
        end = text.index(")", end) + 1
    line = text.count("\n", 0, end) + 1
    col = end - text.rfind("\n", 0, end)
    return " ".join(re.sub(r"//[^\n]*", " ", text[start:end]).split()), Span(source, span.line, span.col, line, col)


@v_args(meta=True)
class DeclarationBuilder(NodeBuilder):
    """Builds a kernel, its header and its declarations."""

    # ---- the kernel and its header
    def start(self, meta, kernels):
        return ast.Program(self._span(meta), kernels)

    def kernel(self, meta, children):
        name, constants, *rest = children
        params = [c for c in rest if isinstance(c, ast.Param)]
        items = [c for c in rest if c is not None and not isinstance(c, ast.Param)]
        return ast.Kernel(self._span(meta), str(name), params, items, name_span=self._tok(name),
                          constants=constants or [])

    def constants(self, meta, children):
        """A default that reads as a name is a dtype (`T = bf16`); any other name is E539 or E564."""
        declared = {c.name for c in children}
        for c in children:
            if isinstance(c.default, ast.ConstUse):
                problem = check_default(c, c.default, declared)
                if problem is not None:
                    raise problem
                c.default = c.default.name
        return children

    def constant(self, meta, children):
        name, default = children
        if isinstance(default, Token) and default.type == "SIZE":
            return ast.ConstantDecl(self._span(meta), str(name), str(default), name_span=self._tok(name))
        if not isinstance(default, ast.ConstUse) and default is not None:
            default = int(default)
        return ast.ConstantDecl(self._span(meta), str(name), default, name_span=self._tok(name))

    def constant_use(self, meta, children):
        return ast.ConstUse(self._span(meta), str(children[0]))

    def size_constant(self, meta, children):
        if str(children[0]) == "none":   # the lexer may take `none` for a name
            return "none"
        return ast.ConstUse(self._span(meta), str(children[0]), size=True)

    def constant_expr(self, meta, children):
        return ast.ConstUse(self._span(meta), "", expr=children[0])

    def param(self, meta, children):
        name, dtype, shape = children
        return ast.Param(self._span(meta), str(name), self._ref(dtype), shape)

    def shape(self, meta, dims):
        return dims

    def dim_symbol(self, meta, children):
        return ast.Dim(self._span(meta), str(children[0]))

    def dim_literal(self, meta, children):
        return ast.Dim(self._span(meta), int(children[0]))

    def int_list(self, meta, children):
        return [self._int(c) for c in children]

    # ---- declarations
    def grid_decl(self, meta, children):
        return ast.GridDecl(self._span(meta), self._ref(children[0]))

    def cluster_decl(self, meta, children):
        if not isinstance(children[0], Token) or children[0].type != "CLUSTER_SHAPE":
            return ast.ClusterDecl(self._span(meta), self._int(children[0]))
        rows, _, cols = str(children[0]).partition("x")
        return ast.ClusterDecl(self._span(meta), int(rows), int(cols))

    def occupancy_decl(self, meta, children):
        return ast.OccupancyDecl(self._span(meta), self._int(children[0]))

    def cta_group_decl(self, meta, children):
        return ast.CtaGroupDecl(self._span(meta), self._int(children[0]))

    def box_decl(self, meta, children):
        name, tensor, shape, *options = children
        box = ast.BoxDecl(self._span(meta), str(name), self._ref(tensor), shape)
        for key, value, span in options:
            setattr(box, key, value)
            box.option_spans[key] = span
        return box

    def bulk_decl(self, meta, children):
        name, tensor, chunk = children
        return ast.BoxDecl(self._span(meta), str(name), self._ref(tensor), [self._int(chunk)], bulk=True)

    def im2col_decl(self, meta, children):
        box = self.box_decl(meta, children)
        box.im2col = True
        return box

    def lower_option(self, meta, children):
        return ("lower", children[0], self._span(meta))

    def upper_option(self, meta, children):
        return ("upper", children[0], self._span(meta))

    def wide_option(self, meta, children):
        return ("wide", str(children[0]), self._span(meta))

    def halo_option(self, meta, children):
        return ("halo", self._int(children[0]), self._span(meta))

    def signed_list(self, meta, children):
        return [self._int(c) for c in children]

    def negative_int(self, meta, children):
        value = self._int(children[0])
        if isinstance(value, ast.ConstUse):
            return ast.ConstUse(self._span(meta), value.name, negative=True)
        return -value

    def swizzle_option(self, meta, children):
        return ("swizzle", self._size(children[0]), self._span(meta))

    def oob_option(self, meta, children):
        return ("oob", str(children[0]), self._span(meta))

    def strides_option(self, meta, children):
        return ("strides", children[0], self._span(meta))

    def l2_option(self, meta, children):
        return ("l2", self._size(children[0]), self._span(meta))

    def pair_option(self, meta, children):
        return ("pair", True, self._span(meta))

    def cache_option(self, meta, children):
        return ("cache", str(children[0]), self._span(meta))

    def interleave_option(self, meta, children):
        return ("interleave", self._size(children[0]), self._span(meta))

    def prefetch_decl(self, meta, children):
        return ast.PrefetchDecl(self._span(meta), self._ref(children[0]))

    def assume_decl(self, meta, children):
        lhs, op, rhs = children
        text, span = _written(self.source, self._span(meta), "assume")
        return ast.AssumeDecl(span, lhs, op, rhs, text)

    def comparison(self, meta, children):
        return str(children[0])

    def pipeline_decl(self, meta, children):
        name, stages, *fields = children
        peer = fields.pop() if fields and isinstance(fields[-1], tuple) else None
        decl = ast.PipelineDecl(self._span(meta), str(name), self._int(stages), fields)
        if peer is not None:
            decl.peer, decl.peer_span = peer
        return decl

    def peer(self, meta, children):
        return self._int(children[0]), self._span(meta)

    def field(self, meta, children):
        name, box = children
        return ast.FieldDecl(self._span(meta), str(name), self._ref(box))

    def tmem_field(self, meta, children):
        name, dtype, shape = children
        return ast.FieldDecl(self._span(meta), str(name), None, (str(dtype), shape), dtype_span=self._tok(dtype))

    def smem_decl(self, meta, children):
        name, stages, box = children
        return ast.SmemDecl(self._span(meta), str(name), self._ref(box), None if stages is None else self._int(stages))

    def mbarrier_decl(self, meta, children):
        name, count = children
        return ast.MbarrierDecl(self._span(meta), str(name), self._int(count))

    def tmem_decl(self, meta, children):
        name, stages, dtype, shape = children
        return ast.TmemDecl(self._span(meta), str(name), 1 if stages is None else self._int(stages), str(dtype), shape,
                            dtype_span=self._tok(dtype))

    def one_warp(self, meta, children):
        warp = self._int(children[0])
        return warp, warp, self._span(meta)

    def warp_range(self, meta, children):
        return self._int(children[0]), self._int(children[1]), self._span(meta)

    def role_decl(self, meta, children):
        name, (first, last, warps_span), regs, body = children
        regs_span = None if regs is None else regs.span if isinstance(regs, ast.ConstUse) else self._tok(regs)
        return ast.RoleDecl(
            self._span(meta), str(name), first, last, self._int(regs) if regs is not None else None,
            body, warps_span=warps_span, regs_span=regs_span,
        )
