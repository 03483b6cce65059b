"""The step processes keep freed memory for their next numpy temporaries (evalpipeline.allocator)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipeline.allocator import MALLOC_TUNING_ENV, MMAP_THRESHOLD, TRIM_THRESHOLD, malloc_tuning, tune_allocator

REPO = Path(__file__).resolve().parents[1]
GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")

# Page faults of 40 rounds of a loop body whose temporaries (four of 1 MiB) are freed together, as PSIS-LOO's
# chunks are: glibc's defaults follow the largest block freed so far (1 MiB: a trim threshold of 2 MiB), so each
# round's 4 MiB is handed back and faulted in again (~1,000 faults a round); tuned, the heap keeps it.
FAULTS = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "code location":
    import evalpipeline.definitions  # noqa: F401 - sets the allocator as it is imported
elif sys.argv[2] == "tune":
    from evalpipeline.allocator import tune_allocator
    tune_allocator()
import numpy as np
if sys.argv[3] == "fork":
    import os
    reader, writer = os.pipe()
    if os.fork():
        os.close(writer)
        print(os.read(reader, 1000).decode())
        sys.exit(0)
np.ones(2**17).sum()  # a 1 MiB block mapped and freed: glibc's default thresholds follow it
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    a = np.ones(2**17)
    b = a * 2
    c = b + a
    d = c * b
    d.sum()
    del a, b, c, d
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
if sys.argv[3] == "fork":
    os.write(writer, json.dumps(faults).encode())
else:
    print(json.dumps(faults))
"""


def _faults(how: str, fork: bool = False, setting: str = "") -> int:
    env = {**os.environ, MALLOC_TUNING_ENV: setting}
    done = subprocess.run([sys.executable, "-c", FAULTS, str(REPO), how, "fork" if fork else "no"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_setting_is_on_unless_off():
    assert malloc_tuning({}) and malloc_tuning({MALLOC_TUNING_ENV: ""}) and malloc_tuning({MALLOC_TUNING_ENV: " On "})
    assert not malloc_tuning({MALLOC_TUNING_ENV: "off"})
    assert tune_allocator({MALLOC_TUNING_ENV: "OFF"}) == {}
    with pytest.raises(ValueError, match=f"{MALLOC_TUNING_ENV}='fast': choose on"):
        tune_allocator({MALLOC_TUNING_ENV: "fast"})


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_tuned_temporaries_reuse_the_heap_instead_of_faulting_fresh_pages():
    assert tune_allocator({}) == {"mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}
    default, tuned = _faults("default"), _faults("tune")
    assert default > 40 * 500, f"glibc's defaults: {default} page faults (expected ~1,000 a round)"
    assert tuned < default / 10, f"tuned: {tuned} page faults against {default} with glibc's defaults"
    assert _faults("tune", setting="off") > 40 * 500  # off leaves glibc's defaults


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_the_code_location_tunes_its_process_and_those_it_forks():
    """What every step process gets: `evalpipeline run`'s workers and the multiprocess executor's steps fork
    from a server that imported the code location; Dask's workers import it to run a step."""
    default = _faults("default", fork=True)
    assert default > 40 * 500
    assert _faults("code location") < default / 10
    assert _faults("code location", fork=True) < default / 10
    assert _faults("code location", fork=True, setting="off") > 40 * 500
