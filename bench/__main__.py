"""python -m bench [SECTION ...]: print every benchmark's figures (sections: ch01, ch02_04, ch05_06, ch07, ch08,
ch09, gpu_paged, site, grading, class)."""
import sys

# The benchmarks run with OpenMP's own waiting (make bench unsets the OMP_WAIT_POLICY=PASSIVE the other targets
# set), as a plain `python` has it: torch's worker threads spin briefly between operations, and a decoding step's
# many small products split between the cores (chapter 7's DecodingLinear) only pay when the second core is awake.
# The grading sections give their graders PASSIVE, as make grade does.
from bench import ch01, ch02_04, ch05_06, ch07, ch08, ch09, class_grading, gpu_paged, grading, site

SECTIONS = {"ch01": ch01.run, "ch02_04": ch02_04.run, "ch05_06": ch05_06.run, "ch07": ch07.run, "ch08": ch08.run,
            "ch09": ch09.run, "gpu_paged": gpu_paged.run, "site": site.run,
            "grading": grading.run, "class": class_grading.run}


def main(argv: list[str]) -> int:
    chosen = argv or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}", file=sys.stderr)
        return 2
    for name in chosen:
        for line in SECTIONS[name]():
            print(f"[{name}] {line}", flush=True)
    return 0


sys.exit(main(sys.argv[1:]))
