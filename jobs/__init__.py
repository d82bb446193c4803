# ISRFLOW_CORE=compiled: this process (and the workers it starts, which inherit the environment)
# runs protocol/ as built by mypyc (jobs.compiled). Here, because importing any jobs module comes
# before its first `import protocol`; only the environment lookup when it is unset.
import os as _os
import sys as _sys

if _os.environ.get("ISRFLOW_CORE") not in (None, "", "pure"):
    from jobs.compiled import activate_from_env

    activate_from_env()

# Arrow's buffers from the C library's allocator, not pyarrow's default mimalloc: a replay makes
# and drops large Arrow buffers every batch (windows sorted and taken, output tables, the
# partition_state columns), and mimalloc hands freed memory back to the kernel soon after, so the
# next batch's buffers fault their pages in again, each zeroed (transparent huge pages: 2 MB at a
# time). At 100k partitions that zeroing was ~0.66 s of a 9 s replay against 0.14 s at 1k (perf:
# clear_page_erms under mimalloc and Arrow's copies); with the system allocator, in pairs, the
# 100k replay's system time fell from 1.00 to 0.70 s and its wall time by ~2% (docs/core-speed.md). Set here, before the first `import pyarrow` of an isrflow
# process, so the workers it starts (a parallel replay's, Spark's Python workers through the JVM)
# inherit it; a process that imported pyarrow first (a Spark worker) switches its default pool.
# A value the user set wins.
if _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system") == "system" and "pyarrow" in _sys.modules:
    _pa = _sys.modules["pyarrow"]
    if _pa.default_memory_pool().backend_name != "system":
        _pa.set_memory_pool(_pa.system_memory_pool())
