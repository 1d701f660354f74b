"""Runs INSIDE the sandbox, as an unprivileged user with no network and no view of the course files.

It imports nothing from this repository (only this file is mounted), so it can be read on its own:

    python sandbox_runner.py execute NOTEBOOK.ipynb OUT.ipynb CELL_TIMEOUT_S
        Run a notebook cell by cell in a fresh python3 kernel. A cell that kills the kernel is replaced
        by an error and the notebook rerun; each cell's output is capped.
    python sandbox_runner.py probe CODE.json INPUTS.safetensors OUT_DIR CELL_TIMEOUT_S
        In this plain process (no kernel, no IPython hooks), run the student's code cells, then each
        probe's code, and save each probe's `result` tensors for the trusted grader to compare.

Whatever the student's code does here can only change what this process writes: the comparison with
the reference happens outside, in the trusted grader.
"""
from __future__ import annotations

import copy
import json
import sys
import traceback

MAX_OUTPUT_CHARS_PER_CELL = 100_000
MAX_RERUNS = 3          # a kernel that keeps dying (say, from a timer) is not rerun forever
KERNEL_DIED = "KernelDied"


def execute(notebook_path: str, out_path: str, cell_timeout_s: str) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    class CappedClient(NotebookClient):
        """Keeps at most MAX_OUTPUT_CHARS_PER_CELL characters of each cell's output (an output flood)."""

        capped: set = set()

        def output(self, outs, msg, display_id, cell_index):
            if cell_index in self.capped:
                return None
            if sum(len(json.dumps(o)) for o in outs) > MAX_OUTPUT_CHARS_PER_CELL:
                self.capped.add(cell_index)
                outs.append(nbformat.v4.new_output("stream", name="stdout", text="\n[output capped by the grader]\n"))
                return None
            return super().output(outs, msg, display_id, cell_index)

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            self.running_index = cell_index      # the cell to blame if the kernel dies
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

    original = nbformat.read(notebook_path, as_version=4)
    killers: list[int] = []
    while True:
        trial = copy.deepcopy(original)
        for index in killers:
            trial.cells[index].source = f"raise RuntimeError('the kernel died while cell {index} ran; it was skipped')"
        client = CappedClient(trial, timeout=int(cell_timeout_s), interrupt_on_timeout=True, allow_errors=True,
                              kernel_name="python3", record_timing=False)
        client.running_index = None
        # Written after every cell, so that a run stopped from outside still shows what it did.
        client.on_cell_executed = lambda **_: nbformat.write(client.nb, out_path)
        try:
            client.execute()
        except DeadKernelError:
            index = client.running_index
            if index is None or index in killers or len(killers) >= MAX_RERUNS:
                return      # out.ipynb holds what ran; the grader marks the rest as not run
            killers.append(index)
            continue
        break
    for index in killers:
        trial.cells[index].source = original.cells[index].source
        trial.cells[index].outputs = [nbformat.v4.new_output(
            "error", ename=KERNEL_DIED, evalue=f"the kernel died while this cell ran (cell {index}); "
            "it was skipped when grading", traceback=[f"{KERNEL_DIED}: the kernel died while this cell ran"])]
    nbformat.write(trial, out_path)


def probe(code_path: str, inputs_path: str, out_dir: str, cell_timeout_s: str = "60") -> None:
    import signal

    import torch
    from safetensors.torch import load_file, save_file

    def interrupt(signum, frame):
        raise KeyboardInterrupt("cell timed out")      # what the notebook run does to a cell that runs too long

    signal.signal(signal.SIGALRM, interrupt)

    spec = json.load(open(code_path, encoding="utf-8"))
    inputs = load_file(inputs_path)
    # The student's cells run as a module of their own, as a kernel runs them in __main__: registered in
    # sys.modules (dataclasses and pickle look a class's module up there), and compiled with dont_inherit so
    # that this file's `from __future__ import annotations` does not turn their annotations into strings.
    import types
    module = types.ModuleType("__student__")
    sys.modules["__student__"] = module
    namespace: dict = module.__dict__
    cell_errors = []
    for index, source in enumerate(spec["cells"]):
        signal.alarm(int(cell_timeout_s))
        try:
            exec(compile(source, f"<student cell {index}>", "exec", dont_inherit=True), namespace)
        except BaseException as exc:  # noqa: BLE001 - a student cell may raise anything, SystemExit included
            cell_errors.append(f"cell {index}: {type(exc).__name__}: {exc}"[:300])
        finally:
            signal.alarm(0)
    report = {"cell_errors": cell_errors, "probes": {}}
    for name, code in spec["probes"].items():
        scope = dict(namespace)
        scope["inputs"] = {k: v.clone() for k, v in inputs.items() if k.startswith(name + ".")}
        scope["inputs"] = {k[len(name) + 1:]: v for k, v in scope["inputs"].items()}
        signal.alarm(int(cell_timeout_s))
        try:
            exec(compile(code, f"<probe {name}>", "exec", dont_inherit=True), scope)
            result = scope["result"]
            tensors = {f"{i}": torch.Tensor.as_subclass(torch.as_tensor(t), torch.Tensor).detach().clone().contiguous()
                       for i, t in enumerate(result if isinstance(result, (tuple, list)) else [result])}
            save_file(tensors, f"{out_dir}/{name}.safetensors")
            report["probes"][name] = "ok"
        except BaseException as exc:  # noqa: BLE001
            report["probes"][name] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            signal.alarm(0)
    with open(f"{out_dir}/report.json", "w", encoding="utf-8") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    try:
        {"execute": execute, "probe": probe}[command](*args)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
