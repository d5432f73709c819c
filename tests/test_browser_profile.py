"""Where the browser loader puts a load's fresh Chromium profile (pure: no browser)."""

from __future__ import annotations

import os

import pytest

from clawbed.replay.loaders.browser import profile_parent

EXT4_ROOT = "/dev/vda / ext4 rw,relatime 0 0\n"
SHM_TMPFS = "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n"


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="this machine has no writable /dev/shm")
def test_a_tmpfs_dev_shm_takes_the_profile() -> None:
    assert profile_parent(EXT4_ROOT + SHM_TMPFS) == "/dev/shm"


def test_without_a_tmpfs_the_temporary_folder_does() -> None:
    assert profile_parent(EXT4_ROOT) is None
    # /dev/shm on a disk file system is no gain: the temporary folder, as before.
    assert profile_parent(EXT4_ROOT + "/dev/vdb /dev/shm ext4 rw 0 0\n") is None
    assert profile_parent("") is None
