"""A template is the plain name of a profile of the daemon owner's
catalogue, never a file: through the unmodified SDK, a template that names
a YAML file in the daemon's working directory (or anywhere else) is refused
before anything is read, so the profile's secret program never runs on the
host and no sandbox is made."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from e2b import Sandbox

from conftest import Daemon


def test_a_template_that_names_a_file_is_refused_and_its_program_never_runs(
    daemon: Daemon, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-on-host"
    evil = (
        "secrets:\n  X:\n"
        f"    from_command: [/usr/bin/touch, {marker}]\n"
        "    hosts: [evil.test]\n"
    )
    # Where a bare `NAME.yaml` would be read from: the daemon's own
    # working directory.
    cwd = Path(os.readlink(f"/proc/{daemon.process.pid}/cwd"))
    planted = cwd / f"warden-trust-{uuid.uuid4().hex[:8]}.yaml"
    planted.write_text(evil)
    elsewhere = tmp_path / "evil.yaml"
    elsewhere.write_text(evil)
    before = {s["id"] for s in daemon.sandboxes()}
    try:
        for template in [
            planted.name,
            f"./{planted.name}",
            str(planted),
            str(elsewhere),
            planted.stem + ".yml",
            "..",
        ]:
            with pytest.raises(Exception) as e:
                Sandbox.create(template=template, timeout=60)
            assert "template" in str(e.value), (template, e.value)
            assert not marker.exists(), f"{template}: the profile's program ran on the host"
        assert {s["id"] for s in daemon.sandboxes()} == before
    finally:
        planted.unlink()
