"""The ustc exception hierarchy.

Every error ustc raises on bad input is a :class:`UstcError`. Format errors are
also :class:`ValueError` so that callers that only know the standard library
can still catch them.
"""

from __future__ import annotations


class UstcError(Exception):
    """Base class of every ustc error."""


class FormatError(UstcError, ValueError):
    """A format string or format object is not a valid ustc format."""


class FormatSyntaxError(FormatError):
    """The format text does not follow the DSL grammar.

    Attributes: ``line`` and ``column`` (1-based), ``source_line`` (the text of
    that line), ``expected`` (sorted names of what the parser would accept).
    """

    def __init__(self, message: str, *, text: str, line: int, column: int,
                 expected: tuple[str, ...] = ()):
        self.text = text
        self.line = line
        self.column = column
        self.expected = tuple(expected)
        lines = text.splitlines() or [""]
        self.source_line = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * (column - 1) + "^"
        detail = f"{message} at line {line}, column {column}:\n    {self.source_line}\n    {caret}"
        if self.expected:
            detail += "\nexpected one of: " + ", ".join(self.expected)
        super().__init__(detail)


class FormatSemanticError(FormatError):
    """The format text parses but breaks a validity rule.

    Attributes: ``rule`` (what is broken), ``level`` (0-based level position or
    None when the rule is about the whole map), ``level_text`` (that level as
    written), and ``line`` / ``column`` when the format came from text.
    """

    def __init__(self, rule: str, *, level: int | None = None, level_text: str | None = None,
                 line: int | None = None, column: int | None = None, source_line: str | None = None):
        self.rule = rule
        self.level = level
        self.level_text = level_text
        self.line = line
        self.column = column
        self.source_line = source_line
        where = ""
        if level is not None:
            where = f"level {level} ({level_text}): " if level_text else f"level {level}: "
        message = where + rule
        if line is not None and column is not None:
            message += f"\n  at line {line}, column {column}"
            if source_line is not None:
                message += f":\n    {source_line}\n    {' ' * (column - 1)}^"
        super().__init__(message)

    def located(self, line: int, column: int, source_line: str) -> "FormatSemanticError":
        """The same error with a source location attached."""
        return FormatSemanticError(self.rule, level=self.level, level_text=self.level_text,
                                   line=line, column=column, source_line=source_line)


class StorageError(UstcError, ValueError):
    """A tensor's buffers do not hold what its format promises."""


class ShapeError(UstcError, ValueError):
    """Operand shapes do not fit together."""


class IndexingError(UstcError, IndexError):
    """An index is out of range for its dimension, or not a valid index (``A[i, j]``)."""


class DeviceError(UstcError, ValueError):
    """Operands live on different or unsupported devices."""


class KernelError(UstcError):
    """An index-notation kernel is malformed."""


class ConversionWarning(UserWarning):
    """An operand was converted to another format before a kernel could walk it."""


class UnsupportedOperation(UstcError, NotImplementedError):
    """The operation is not available for these operands."""


class FileFormatError(UstcError, ValueError):
    """A tensor file is malformed."""


class SolveError(UstcError, ArithmeticError):
    """An iterative solve did not converge."""


class MissingDependencyError(UstcError, ImportError):
    """An optional package is needed; the message names the extra to install."""


def require(module: str, extra: str):
    """Import optional ``module`` or raise :class:`MissingDependencyError` naming ``extra``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            f"this feature needs the optional package '{module}': pip install 'ustc[{extra}]'"
        ) from exc


class DistributedError(UstcError, RuntimeError):
    """A distributed operation failed: a worker was lost or a block could not be reached.

    Attribute ``lost_blocks``: the block indices whose workers are gone (may be empty).
    """

    def __init__(self, message: str, *, lost_blocks=()):
        self.lost_blocks = tuple(lost_blocks)
        super().__init__(message)
