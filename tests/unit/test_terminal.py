"""What the terminal says when something is wrong, from real outputs (tests/golden/terminal/).

Each example is rendered by the same code a run uses (the stage's error text, the verdict,
terminal.summary) from what a real run saw: `git apply --check -v` of the 6.1 backport's
patch 2 against the Debian 6.12 base; the real 6.12 .config of the base fragment with the
real Kconfig entries behind CONFIG_IPV6 and a typo; and the console text and
decode_stacktrace.sh output of the patches/warn-boot-shutdown kernel (2026-11-23). The
docs/results.md's failure examples are these renderings: `test_readme_examples_are_current` keeps
them in step (`python -m tests.unit.test_terminal` rewrites them).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harness.base.model import CellResult, PatchResult, PatchState, Phase, Status
from harness.base.model import TestResult as Result
from harness.judge import splat, verdict
from harness.kernel import kconfig, series
from harness.output import terminal

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "terminal"
RUN = Path("/home/dev/linux-harness/results/20261123-161623-4242")  # as a run would say


def cell(status: Status, error: str = "", tests: tuple[Result, ...] = (),
         patches: tuple[PatchResult, ...] = ()) -> CellResult:
    return CellResult(cell="adhoc", kernel="debian:6.12", kernel_version="", status=status,
                      patches=patches, config=None, stages=(), tests=tests, error=error,
                      arch="x86_64", toolchain="gcc")


def conflict_example() -> str:
    patch = series.Patch(path=REPO / "patches/memcg-kfuncs/6.1/"
                         "0002-mm-memcontrol-add-BPF-kfuncs-to-read-memcg-statistic.patch",
                         series="--patch")
    detail = series.conflict_detail((GOLDEN / "conflict-git-apply-v.txt").read_text(), [])
    results_ = (PatchResult(name=patch.name, subject="mm: memcontrol: add BPF kfuncs to read "
                            "memcg statistics", state=PatchState.CONFLICT, detail=detail),)
    err = series.conflict_error(patch, 1, 1, "bc75b79b2ffe6f0b20e2aea07435a7527407ad9a",
                                detail, results_, log=RUN / "adhoc" / "git-am.log")
    return terminal.summary([cell(Status.PATCH_CONFLICT, str(err), patches=results_)], base=RUN)


def dropped_example() -> str:
    final = kconfig.parse_config((REPO / "tests/golden/kconfig/6.12-base.config").read_text())
    fragments = [REPO / "kconfigs/base.config", GOLDEN / "net.config"]
    index = kconfig.index_kconfig(REPO / "tests/golden/kconfig/tree")
    dropped = kconfig.verify(final, kconfig.requested_symbols(fragments), index)
    err = kconfig.dropped_error(dropped, fragments, final, index,
                                log=RUN / "adhoc" / "kconfig.log")
    return terminal.summary([cell(Status.CONFIG_ERROR, str(err))], base=RUN)


def _warn(name: str, phase: Phase) -> Result:
    (found,) = splat.find_splats((GOLDEN / f"warn-{name}.console.txt").read_text())
    decoded = (GOLDEN / f"warn-{name}.decoded.txt").read_text()
    found = splat.relative_to_tree(found.__class__(**{**found.__dict__, "decoded": decoded}),
                                   "debian-6.12-6.12.117-1_deb12u1-base")
    log = RUN / "adhoc" / "guest" / ("console.log" if phase is Phase.SHUTDOWN else "dmesg.txt")
    return Result(name=name, phase=phase, status=Status.PASS, duration_s=4.5 if
                  phase is Phase.BOOT else 0.0, exit_code=None, ktap=None, splats=(found,),
                  taint="W" if phase is Phase.BOOT else "", log=log)


def splats_example() -> str:
    tests = (_warn("boot", Phase.BOOT),
             Result(name="setup", phase=Phase.SETUP, status=Status.PASS, duration_s=0.0,
                    exit_code=None, ktap=None),
             _warn("shutdown", Phase.SHUTDOWN),
             Result(name="cgroup_iter_rstat", status=Status.PASS, duration_s=1.4, exit_code=0,
                    ktap=None))
    v = verdict.judge(tests, kernel_version="6.12.117+", expectations=verdict.Expectations(),
                      rules=verdict.CellRules())
    return terminal.summary([cell(v.status, v.error, v.results)], base=RUN)


def no_tests_example() -> str:
    tests = tuple(Result(name=n, phase=p, status=Status.PASS, duration_s=0.0, exit_code=None,
                         ktap=None)
                  for n, p in (("boot", Phase.BOOT), ("setup", Phase.SETUP),
                               ("shutdown", Phase.SHUTDOWN)))
    skipped = Result(name="memcg_kfuncs", status=Status.SKIP, duration_s=0.0, exit_code=None,
                     ktap=None, reason="skipped by the harness: the kernel lacks "
                                       "bpf_get_mem_cgroup (kfunc)")
    v = verdict.judge((*tests, skipped), kernel_version="6.12.117+",
                      expectations=verdict.Expectations(), rules=verdict.CellRules())
    return terminal.summary([cell(v.status, v.error, v.results)], base=RUN)


EXAMPLES = {"conflict": conflict_example, "dropped-option": dropped_example,
            "splats-outside-tests": splats_example, "nothing-tested": no_tests_example}


def flat(text: str) -> str:
    """Wrapping aside: every run of blanks (a line break included) as one space."""
    return " ".join(text.split())


def test_conflict_names_patch_file_line_hunk_fix_and_log() -> None:
    text = flat(conflict_example())
    assert "PATCH_CONFLICT" in text
    assert "patches/memcg-kfuncs/6.1/0002-mm-memcontrol-add-BPF-kfuncs" in text
    assert "mm/memcontrol.c:1628: hunk does not apply" in text
    assert "| #define K(x) ((x) << (PAGE_SHIFT-10))" in text  # the hunk git looked for
    assert "fix: rebase the patch onto this base" in text
    assert "log: 20261123-161623-4242/adhoc/git-am.log" in text


def test_dropped_option_names_option_line_dependency_and_fix() -> None:
    text = flat(dropped_example())
    assert ("CONFIG_IPV6_MULTIPLE_TABLES: asked y, got n (requested at "
            "tests/golden/terminal/net.config:2)") in text
    # no `depends on` of its own: it sits inside `if IPV6` of net/ipv6/Kconfig
    assert "IPV6_MULTIPLE_TABLES (net/ipv6/Kconfig): unmet depends on IPV6 (IPV6=n)" in text
    assert "did you mean CGROUP_BPF?" in text
    assert "fix: add CONFIG_IPV6=y to the fragment" in text
    assert "log: 20261123-161623-4242/adhoc/kconfig.log" in text


def test_splats_outside_tests_are_decoded_and_attributed() -> None:
    text = splats_example()
    assert text.splitlines()[0].startswith("== adhoc [debian:6.12]  CRASHED")
    text = flat(text)
    assert "kernel WARNING in warn_at_boot_init() during boot" in text
    assert "at warn_at_boot_init (kernel/reboot.c:1404)" in text
    assert "kernel WARNING in warn_on_power_off() during shutdown" in text
    assert "at warn_on_power_off (kernel/reboot.c:1394)" in text
    assert "../../work/" not in text  # paths relative to the tree


def test_nothing_tested_is_said() -> None:
    text = no_tests_example()
    assert "SKIP" in text.splitlines()[0]
    text = flat(text)
    assert "every test was skipped: nothing was tested" in text
    assert "the kernel lacks bpf_get_mem_cgroup" in text


def test_every_line_fits_100_columns() -> None:
    for name, example in EXAMPLES.items():
        for line in example().splitlines():
            # only a single word (a path) may be longer
            assert len(line) <= 100 or " " not in line.strip(), (name, line)


def _readme_block(name: str, text: str) -> str:
    return f"<!-- example: {name} -->\n```\n{text}\n```\n<!-- /example -->"


def readme_with_examples(readme: str) -> str:
    for name, example in EXAMPLES.items():
        readme = re.sub(rf"<!-- example: {re.escape(name)} -->.*?<!-- /example -->",
                        lambda _m, n=name, e=example: _readme_block(n, e()), readme,
                        flags=re.DOTALL)
    return readme


def test_readme_examples_are_current() -> None:
    readme = (REPO / "docs" / "results.md").read_text()
    for name in EXAMPLES:
        assert f"<!-- example: {name} -->" in readme, name
    assert readme == readme_with_examples(readme), \
        "README failure examples are stale: run .venv/bin/python -m tests.unit.test_terminal"


if __name__ == "__main__":
    path = REPO / "docs" / "results.md"
    path.write_text(readme_with_examples(path.read_text()))
    sys.exit(0)
