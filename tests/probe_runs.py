"""Many re-check runs of one chapter (autograde/sandbox_runner.py's `probe`), each in a process forked from one
that has already imported what the chapter's cells import.

    python -m tests.probe_runs < FOLDERS.json      one work folder per line of the JSON list; prints exit statuses

The grader starts each run afresh in the sandbox; the tests of the probes themselves run dozens per chapter (one per
known-wrong implementation), and a fresh interpreter spent most of each run importing torch and transformers again.
A forked child runs the same `probe` function on the same files: only the imports are shared, and they are the same
modules a fresh process would import. Runs go two at a time (the machine's cores)."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from autograde.sandbox import RUNNER      # the file the grader runs in the sandbox
AT_ONCE = 2


def _runner():
    spec = importlib.util.spec_from_file_location("sandbox_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    folders = [Path(f) for f in json.loads(sys.stdin.read())]
    runner = _runner()
    import torch  # noqa: F401 - what every run imports first
    import safetensors.torch  # noqa: F401
    cells = json.loads((folders[0] / "code.json").read_text())["cells"] if folders else []
    # What the cells import at their top level (attnlab's aside: cheap, and never preloaded for a chapter that writes it)
    for name in dict.fromkeys(module for module, _ in runner.top_level_imports(cells)
                              if not module.startswith("attnlab")):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the run itself will meet the same error and report it
            pass
    statuses: dict[int, int] = {}
    running: dict[int, int] = {}          # pid -> index
    pending = list(enumerate(folders))
    while pending or running:
        while pending and len(running) < AT_ONCE:
            index, folder = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                os.chdir(folder)
                code = 0
                try:
                    runner.probe("code.json", "inputs.safetensors", ".", "60")
                except BaseException:  # noqa: BLE001 - reported as the run's exit status
                    import traceback
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)          # as the runner ends: nothing the student's code left behind may hold it
            running[pid] = index
        pid, status = os.wait()
        if pid in running:
            statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    print(json.dumps([statuses[i] for i in range(len(folders))]))


if __name__ == "__main__":
    main()
