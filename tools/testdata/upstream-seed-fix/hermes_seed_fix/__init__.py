"""A minimal fix of three upstream hermes-agent 0.19.0 bugs, applied when the modules that have
them are imported. See README.md beside this package for what it changes and what it leaves.

Nothing is imported eagerly: install() only registers an import hook, so interpreters that never
touch hermes pay nothing, and a module already imported is patched on the spot.
"""

import importlib.abc
import logging
import os
import sys
import threading

# Automatic attempts that may fail as malformed JSON, an HTTP 5xx or an over-cap fan-out before
# the gateway stops billing the card.
ATTEMPT_BUDGET = 3
# The largest fan-out applied; a larger reply is rejected whole.
MAX_CHILDREN = 64
# The author upstream's gateway passes for its automatic decomposes; explicit CLI calls differ.
AUTO_AUTHOR = "auto-decomposer"

_log = logging.getLogger("hermes_seed_fix")
_failures = {}
_failures_lock = threading.Lock()
# The HTTP status of the most recent failed LLM call on this thread (the dispatcher runs one
# decompose at a time per worker thread).
_last_call = threading.local()


def _http_status(exc):
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _patch_aux_client(module):
    original = module.call_llm

    def call_llm(*args, **kwargs):
        _last_call.status = None
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            _last_call.status = _http_status(exc)
            raise

    call_llm.__wrapped__ = original
    module.call_llm = call_llm


def _counts_against_budget(outcome):
    reason = outcome.reason or ""
    if reason == "LLM returned malformed JSON":
        return True
    if reason.startswith("LLM error:"):
        status = getattr(_last_call, "status", None)
        return status is not None and 500 <= status <= 599
    return reason.startswith("DB rejected graph: fan-out over the cap")


def _patch_decompose(module):
    original = module.decompose_task

    def decompose_task(task_id, *args, **kwargs):
        if kwargs.get("author") != AUTO_AUTHOR:
            return original(task_id, *args, **kwargs)
        key = (
            os.environ.get("HERMES_HOME", ""),
            os.environ.get("HERMES_KANBAN_BOARD", ""),
            task_id,
        )
        with _failures_lock:
            failed = _failures.get(key, 0)
        if failed >= ATTEMPT_BUDGET:
            return module.DecomposeOutcome(
                task_id, False, f"auto-decompose budget spent ({failed} failed attempts)"
            )
        _last_call.status = None
        outcome = original(task_id, *args, **kwargs)
        if not outcome.ok and _counts_against_budget(outcome):
            with _failures_lock:
                _failures[key] = _failures.get(key, 0) + 1
                failed = _failures[key]
            if failed >= ATTEMPT_BUDGET:
                _log.warning(
                    "auto-decompose: %s parked after %d failed attempts (%s)",
                    task_id, failed, outcome.reason,
                )
        return outcome

    decompose_task.__wrapped__ = original
    module.decompose_task = decompose_task


def _patch_db(module):
    original = module.decompose_triage_task

    def decompose_triage_task(conn, task_id, *args, **kwargs):
        children = kwargs.get("children")
        if children is not None and len(children) > MAX_CHILDREN:
            raise ValueError(
                f"fan-out over the cap: {len(children)} children (at most {MAX_CHILDREN})"
            )
        return original(conn, task_id, *args, **kwargs)

    decompose_triage_task.__wrapped__ = original
    module.decompose_triage_task = decompose_triage_task


_PATCHES = {
    "agent.auxiliary_client": _patch_aux_client,
    "hermes_cli.kanban_decompose": _patch_decompose,
    "hermes_cli.kanban_db": _patch_db,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install():
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for name, patch in _PATCHES.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    sys.meta_path.insert(0, _Finder())
