"""Rewrite one module's ``torchrl`` imports with libcst (comments and layout kept) and
list what has no counterpart here."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from rl_migrate._resolve import resolve, resolve_module
from rl_migrate._table import ARGS, DOCS_PAGE, row_for
from rl_migrate.exceptions import MigrateError

__all__ = ["Finding", "Rewrite", "rewrite_source"]


@dataclass(frozen=True)
class Finding:
    """A TorchRL name or argument with no counterpart here.

    Attributes:
        path: the file.
        line: the line of the import or call.
        symbol: ``name`` or ``Class(argument=)``.
        row: the row of the migration page that says what to do.
    """

    path: str
    line: int
    symbol: str
    row: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {self.symbol}: no counterpart here; see "
                f"{DOCS_PAGE}, row \"{self.row}\"")


@dataclass
class Rewrite:
    """One file's result: the new source and the findings.

    Attributes:
        path: the file.
        source: the original text.
        new_source: the rewritten text.
        findings: what has no counterpart, in line order.
    """

    path: str
    source: str
    new_source: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the rewrite differs from the original."""
        return self.new_source != self.source


def _dotted(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _is_torchrl(module: str) -> bool:
    return module == "torchrl" or module.startswith("torchrl.")


class _Migrator(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.findings: list[Finding] = []
        self.local: dict[str, str] = {}  # local name -> the TorchRL class it is

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _find(self, node: cst.CSTNode, symbol: str, row: str) -> None:
        self.findings.append(Finding(self.path, self._line(node), symbol, row))

    # -- from torchrl.x import a, b ---------------------------------------------------
    def _split(self, node: cst.ImportFrom) -> list[cst.ImportFrom] | None:
        module = _dotted(node.module)
        if node.relative or not _is_torchrl(module):
            return None
        if isinstance(node.names, cst.ImportStar):
            self._find(node, f"from {module} import *", row_for("*", module))
            return None
        groups: dict[str, list[cst.ImportAlias]] = {}
        for alias in node.names:
            name = _dotted(alias.name)
            target = resolve(module, name)
            local = alias.asname.name.value if alias.asname else name
            self.local[local] = name
            if target is None:
                self._find(node, f"{module}.{name}", row_for(name, module))
                target = module  # kept: the script still needs TorchRL for it
            groups.setdefault(target, []).append(alias)
        if list(groups) == [module]:
            return None
        out = []
        for target, aliases in groups.items():
            if node.lpar is None:  # a trailing comma needs the parentheses
                aliases = [*aliases[:-1],
                           aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            expr = cst.parse_expression(target)
            out.append(node.with_changes(module=expr, names=aliases))
        return out

    # -- import torchrl.x [as y] -------------------------------------------------------
    def _rename(self, node: cst.Import) -> cst.Import | None:
        names, changed = [], False
        for alias in node.names:
            module = _dotted(alias.name)
            if not _is_torchrl(module):
                names.append(alias)
                continue
            target = resolve_module(module)
            if target is None:
                self._find(node, f"import {module}", row_for(module, module))
                names.append(alias)
                continue
            names.append(alias.with_changes(name=cst.parse_expression(target)))
            changed = True
        return node.with_changes(names=names) if changed else None

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel:
        body: list[cst.BaseSmallStatement] = []
        for small, orig in zip(updated.body, original.body, strict=True):
            if isinstance(orig, cst.ImportFrom):
                split = self._split(orig)
                body.extend(split if split is not None else [small])
            elif isinstance(orig, cst.Import):
                renamed = self._rename(orig)
                body.append(renamed if renamed is not None else small)
            else:
                body.append(small)
        if len(body) == len(updated.body):
            return updated.with_changes(body=body)
        if len(updated.body) == 1:  # one import split in several: one line each
            lines = [updated.with_changes(body=[b]) for b in body]
            lines[1:] = [line.with_changes(leading_lines=[]) for line in lines[1:]]
            return cst.FlattenSentinel(lines)
        body = [b.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for b in body]
        return updated.with_changes(body=body)

    # -- Class(argument=...) with no counterpart ---------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        name = self.local.get(_dotted(node.func))
        if name is None:
            return
        for arg in node.args:
            if arg.keyword is not None and (name, arg.keyword.value) in ARGS:
                self._find(arg, f"{name}({arg.keyword.value}=)", ARGS[name, arg.keyword.value][1])


def rewrite_source(source: str, path: str = "<string>") -> Rewrite:
    """Rewrite ``source``'s TorchRL imports.

    Args:
        source: a Python module's text.
        path: its name in messages.

    Returns:
        The :class:`Rewrite` (new text and findings).

    Raises:
        MigrateError: ``source`` is not valid Python (the message names file, line, column).

    Examples:
        >>> out = rewrite_source("from torchrl.envs import GymEnv  # env\\n")
        >>> out.new_source
        'from rl_envs import GymEnv  # env\\n'
        >>> out = rewrite_source("from torchrl.envs import GymEnv, Nope\\n", "s.py")
        >>> print(out.new_source, end="")
        from rl_envs import GymEnv
        from torchrl.envs import Nope
        >>> str(out.findings[0]).split(";")[0]
        's.py:1: torchrl.envs.Nope: no counterpart here'
    """
    try:
        tree = cst.parse_module(source)
    except cst.ParserSyntaxError as err:
        raise MigrateError(
            f"{path}:{err.raw_line}:{err.raw_column + 1}: syntax error: {err.message}; "
            "the file is left untouched"
        ) from None
    migrator = _Migrator(path)
    new = MetadataWrapper(tree).visit(migrator)
    findings = sorted(migrator.findings, key=lambda f: f.line)
    return Rewrite(path, source, new.code, findings)
