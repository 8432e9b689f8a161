"""A cell's private folder outlives a killed worker (Ray sends SIGKILL, so no cleanup runs there): the next cell
removes the folders of workers that are gone, and leaves the living workers' folders and anything else alone."""
import os
import subprocess
import sys

from attnlab.sweep import cell


def test_folders_of_gone_workers_are_removed_and_the_rest_kept(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead = tmp_path / f"{cell.CELL_TMP}{ended.stdout.strip()}-abc"
    living = tmp_path / f"{cell.CELL_TMP}{os.getpid()}-def"
    older = tmp_path / f"{cell.CELL_TMP}xyz123"  # the layout before the pid was in the name: not ours to judge
    other = tmp_path / "someone-else"
    for d in (dead, living, older, other):
        (d / "run").mkdir(parents=True)
    assert cell.remove_orphans(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(d.name for d in (living, older, other))
