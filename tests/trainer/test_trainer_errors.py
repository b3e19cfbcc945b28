"""Every exception class the trainer defines derives from one root, ``trainer.trainer_errors.TrainerError``,
which the entry points catch for their one-line error (as ``LauncherError`` and ``EvidenceError`` are the
launcher's and the evidence's roots). The classes are found by walking the package's source, so one added in a
module that needs an optional package (vLLM, TRL) is held to it too."""

from __future__ import annotations

import ast
import builtins
import importlib

from tests.sweeps import REPO

BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _trainer_classes() -> list[tuple[str, str, list[str]]]:
    """(module, class name, its bases' names) for every class defined anywhere in trainer/."""
    classes = []
    for path in sorted((REPO / "trainer").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes.append((module, node.name, [_base_name(b) for b in node.bases]))
    return classes


def _closure(classes, seeds: set[str], also=lambda base: False) -> set[str]:
    """The names of the classes whose bases reach ``seeds`` (or a base ``also`` accepts), transitively."""
    found = set(seeds)
    while True:
        more = {name for _, name, bases in classes if any(b in found or also(b) for b in bases)}
        if more <= found:
            return found
        found |= more


def test_every_exception_the_trainer_defines_derives_from_trainer_error():
    from trainer.trainer_errors import TrainerError

    classes = _trainer_classes()
    exceptions = _closure(classes, set(), lambda b: b in BUILTIN_EXCEPTIONS or b.endswith(("Error", "Exception")))
    rooted = _closure(classes, {"TrainerError"})
    defined = {(module, name) for module, name, _ in classes if name in exceptions and name != "TrainerError"}
    assert len(defined) >= 17, sorted(defined)  # the walk finds them (a broken walk would pass vacuously)
    loose = sorted(f"{module}.{name}" for module, name in defined if name not in rooted)
    assert not loose, f"trainer exceptions that do not derive from TrainerError: {loose}"
    for module, name in sorted(defined):  # and as Python sees them, where the module imports here
        try:
            cls = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:  # an optional package (vLLM, TRL) this venv lacks: the walk held it
            assert not exc.name.startswith(("trainer", "facts")), exc
            continue
        assert issubclass(cls, TrainerError), f"{module}.{name}"
