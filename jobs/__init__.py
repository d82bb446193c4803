# ISRFLOW_CORE=compiled: this process (and the workers it starts, which inherit the environment)
# runs protocol/ as built by mypyc (jobs.compiled). Here, because importing any jobs module comes
# before its first `import protocol`; only the environment lookup when it is unset.
import os as _os

if _os.environ.get("ISRFLOW_CORE") not in (None, "", "pure"):
    from jobs.compiled import activate_from_env

    activate_from_env()
