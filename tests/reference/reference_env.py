"""What every reference test script shares: the rule for missing Python
packages, and its work directory.

  try:
      import torch
  except ImportError as e:
      missing(e)
"""
import os
import shutil
import sys


def missing(error, what=None):
    """The reference implementation cannot be imported: the test is skipped
    (exit 77) on a developer's machine, and fails under CI, which never goes
    green by skipping."""
    print(f"SKIP: {what + ' not importable' if what else 'missing package'} ({error}); run scripts/setup.sh")
    sys.exit(1 if os.environ.get("CI") else 77)


def fresh_dir(path, *subdirs):
    """`path` emptied (and `subdirs` inside it created); returns path."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for s in subdirs:
        os.makedirs(os.path.join(path, s))
    return path


def check(good, text):
    """Prints one of a test's checks as "ok" or "FAIL" with what it found; returns `good`."""
    print(f"{'ok  ' if good else 'FAIL'} {text}", flush=True)
    return good
