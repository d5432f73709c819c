"""The Vagrantfile: valid for Vagrant (checked offline), a Debian 12 box provisioned by the
project's install script plus Grafana, ports and folders as the README and docs/guide/dashboards.md say."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from clawbed.paths import REPO_ROOT

VAGRANTFILE = REPO_ROOT / "Vagrantfile"
GRAFANA_REPO_HOST = "apt.grafana.com"


def test_vagrant_validates_it(tmp_path: Path) -> None:
    vagrant = shutil.which("vagrant")
    assert vagrant, ("vagrant is not installed: `apt-get install vagrant` (Debian's package; "
                     "scripts/provision.sh installs it) — this test must not be skipped")
    # Vagrant's own state goes to the test's folder, not into the repository.
    env = {**os.environ, "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"), "VAGRANT_HOME": str(tmp_path / "home"),
           "VAGRANT_CHECKPOINT_DISABLE": "1"}
    proc = subprocess.run([vagrant, "validate", "--ignore-provider"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "validated successfully" in proc.stdout, proc.stdout + proc.stderr


def test_it_provisions_what_the_readme_says() -> None:
    text = VAGRANTFILE.read_text()
    for needed in ('config.vm.box = "debian/bookworm64"', "bash scripts/provision.sh",
                   'synced_folder ".", "/vagrant"', 'synced_folder "../shared", "/shared" if File.directory?(SHARED_DATA)',
                   'CLAWBED_ENV["CLAWBED_SHARED"] = "/shared" if File.directory?(SHARED_DATA)',
                   "guest: GRAFANA_PORT, host: GRAFANA_PORT", "GRAFANA_PORT = 3000",
                   "/vagrant/dashboards/provisioning/datasources/clawbed.yaml",
                   "/vagrant/dashboards/provisioning/dashboards/clawbed.yaml", "systemctl restart grafana-server",
                   "clawbed dash influx start"):
        assert needed in text, needed


def test_grafanas_repository_is_named_only_in_the_vagrantfile() -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    this_test = Path(__file__).resolve().relative_to(REPO_ROOT).as_posix()
    naming = []
    for name in listed:
        path = REPO_ROOT / name
        if name in ("Vagrantfile", this_test) or not path.is_file():
            continue
        try:
            if GRAFANA_REPO_HOST in path.read_text(errors="ignore"):
                naming.append(name)
        except OSError:
            continue
    assert GRAFANA_REPO_HOST in VAGRANTFILE.read_text()
    assert not naming, f"only the Vagrantfile may name Grafana's package repository: {naming}"
