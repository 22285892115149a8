"""Red team: a seed file is written once and never repaired (new files only), so a copy-back that
fails mid-file (ENOSPC: a candidate engine fills the host disk through its host-backed /cacheon-jit
or receipts dir; or the validator is killed) must leave nothing, not a truncated file."""

import errno
import os

from arena.engine.jit_copies import warm_seed_caches


def test_a_copy_back_that_fails_midway_leaves_no_truncated_seed(tmp_path, monkeypatch):
    priv, seed = tmp_path / "priv", tmp_path / "seed"
    (priv / "abc").mkdir(parents=True)
    seed.mkdir()
    (priv / "abc" / "__grp__k.json").write_bytes(b"{" + b"x" * (1 << 20) + b"}")
    real = os.sendfile

    def full_disk(out_fd, in_fd, offset, count):  # half the file fits, then the disk is full
        if os.fstat(out_fd).st_size >= 1 << 19:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(out_fd, in_fd, offset, min(count, 1 << 19))

    monkeypatch.setattr(os, "sendfile", full_disk)
    warm_seed_caches({"TRITON_CACHE_DIR": str(priv)}, {"TRITON_CACHE_DIR": str(seed)})
    monkeypatch.setattr(os, "sendfile", real)
    left = [os.path.join(d, f) for d, _, fs in os.walk(seed) for f in fs]
    assert left == [], f"partial seed files left behind: {[(p, os.path.getsize(p)) for p in left]}"
    warm_seed_caches({"TRITON_CACHE_DIR": str(priv)}, {"TRITON_CACHE_DIR": str(seed)})  # space back: a whole copy
    assert (seed / "abc" / "__grp__k.json").read_bytes() == (priv / "abc" / "__grp__k.json").read_bytes()


def test_a_temp_file_a_kill_left_in_the_seeds_reaches_no_engine(tmp_path):
    from arena.engine.jit_copies import private_caches

    seed = tmp_path / "seed"
    (seed / "abc").mkdir(parents=True)
    (seed / "abc" / ".cacheon-tmp-123-456").write_bytes(b"half a file")
    (seed / "abc" / "whole.cubin").write_bytes(b"compiled")
    got = private_caches(tmp_path / "scratch", {"TRITON_CACHE_DIR": str(seed)})
    names = sorted(f for _, _, fs in os.walk(got["TRITON_CACHE_DIR"]) for f in fs)
    assert names == ["whole.cubin"]


def test_flashinfers_copy_back_takes_only_its_own_cache_and_no_link_out(tmp_path):
    """A pristine engine's FlashInfer workspace base is copied back only under .cache/flashinfer, and
    a .cache that links out of the private copy (a host dir planted there) is never walked."""
    private, seed = tmp_path / "private", tmp_path / "seed"
    (private / ".cache" / "flashinfer" / "ops").mkdir(parents=True)
    (private / ".cache" / "flashinfer" / "ops" / "k.so").write_bytes(b"built")
    (private / "stray.txt").write_bytes(b"not flashinfer's")
    seed.mkdir()
    warm_seed_caches({"FLASHINFER_WORKSPACE_BASE": str(private)}, {"FLASHINFER_WORKSPACE_BASE": str(seed)})
    assert (seed / ".cache" / "flashinfer" / "ops" / "k.so").read_bytes() == b"built"
    assert not (seed / "stray.txt").exists()
    # a .cache/flashinfer that is a link out of the private copy is not walked
    elsewhere, linked, seed2 = tmp_path / "elsewhere", tmp_path / "linked", tmp_path / "seed2"
    (elsewhere / "flashinfer").mkdir(parents=True)
    (elsewhere / "flashinfer" / "x.so").write_bytes(b"outside")
    linked.mkdir()
    (linked / ".cache").symlink_to(elsewhere)
    warm_seed_caches({"FLASHINFER_WORKSPACE_BASE": str(linked)}, {"FLASHINFER_WORKSPACE_BASE": str(seed2)})
    assert not seed2.exists() or not any(seed2.rglob("*"))
