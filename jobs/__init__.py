# ISRFLOW_CORE=compiled: this process (and the workers it starts, which inherit the environment)
# runs protocol/ as built by mypyc (jobs.compiled). Here, because importing any jobs module comes
# before its first `import protocol`.
import os as _os

_core = _os.environ.get("ISRFLOW_CORE")
if _core not in (None, "", "pure"):
    import sys as _sys

    from jobs.compiled import CompiledCoreError as _Error
    from jobs.compiled import activate as _activate
    try:
        if _core != "compiled":
            raise _Error(f"ISRFLOW_CORE={_core!r}: use compiled (protocol/ built by ./dev compile) or pure")
        _activate()
    except _Error as _e:
        print(f"error: {_e}", file=_sys.stderr)
        raise SystemExit(2) from None
