"""The code embedder's third-party corpus (training/embed/corpus.py): the recorded list
keeps to its rules and away from everything we evaluate on, and `download` checks,
extracts safely and caches a local sdist (no network: file:// addresses and fake
openers)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

import training.embed.corpus as corpus
from bench.codesearch import THIRD_PARTY
from bench.index import make_plan
from training.embed.corpus import (
    EVALUATED_PACKAGES,
    MARKER,
    RELATED_PACKAGES,
    CorpusError,
    Entry,
    Unconfirmed,
    canonical,
    check_entries,
    declared_license,
    download,
    installed,
    license_family,
    make_entry,
    read_corpus,
    role_of,
    trees_by_role,
    vendored,
)
from training.tasks.pypi import DEFAULT_PROJECTS, project_name


def evaluated_by_the_code() -> set[str]:
    """The distributions our benchmarks and tests evaluate on, read from the code that
    evaluates them (not from the corpus module's own list)."""
    to_dist = packages_distributions()
    names = {canonical(to_dist.get(module, [module])[0]) for module in THIRD_PARTY}
    names |= {project_name(spec) for spec in DEFAULT_PROJECTS}
    for quick in (True, False):
        for level in make_plan(quick)["levels"]:
            names |= {canonical(to_dist.get(p, [p])[0]) for p in level.get("packages", ())}
    return names | {"more-itertools"}  # named by issue 35


# ------------------------------------------------------------ the recorded list
def test_the_evaluated_list_covers_every_package_the_code_evaluates():
    found = evaluated_by_the_code()
    assert {"attrs", "click", "httpx", "jinja2", "requests", "rich", "urllib3"} <= found
    assert found <= EVALUATED_PACKAGES, sorted(found - EVALUATED_PACKAGES)


def test_the_corpus_and_the_evaluated_packages_are_apart():
    names = {canonical(e.name) for e in read_corpus()}
    assert not names & (EVALUATED_PACKAGES | RELATED_PACKAGES | evaluated_by_the_code())
    # nor a package named after one ("rich-click", "types-requests", "jinja2-time")
    for name in names:
        for evaluated in EVALUATED_PACKAGES:
            assert not re.search(rf"(^|-){re.escape(evaluated)}($|-)", name), (name, evaluated)


def test_no_corpus_package_is_installed_here():
    """bench.codesearch takes its third-party trees from this environment: a package
    added to it later could become an evaluation tree."""
    clash = {canonical(e.name) for e in read_corpus()} & installed()
    assert not clash, f"installed here, so a possible evaluation tree: {sorted(clash)}"


def test_the_recorded_corpus_keeps_to_its_rules():
    entries = read_corpus()  # raises on a broken rule
    assert 40 <= len(entries) <= 70
    assert check_entries(entries) == []
    for e in entries:
        assert license_family(e.license), e
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256), e
        assert re.fullmatch(r"\d+(\.\d+)+", e.version), e
        assert e.role == role_of(e.name)
        assert e.url.startswith("https://") and e.url.endswith("/" + e.filename)
    train = {canonical(e.name) for e in entries if e.role == "train"}
    dev = {canonical(e.name) for e in entries if e.role == "dev"}
    assert train and dev and not train & dev
    assert len(train) + len(dev) == len(entries)  # no package twice
    assert 0.08 <= len(dev) / len(entries) <= 0.25
    data = json.loads(corpus.CORPUS_FILE.read_text())
    assert str(corpus.DEV_MODULUS) in data["rule"]


def test_check_entries_names_each_broken_rule():
    good = Entry(
        "fakepkg", "1.0", "MIT", "license", role_of("fakepkg"), "fakepkg-1.0.tar.gz",
        "https://example.org/f/fakepkg-1.0.tar.gz", 10, "a" * 64,
    )  # fmt: skip
    assert check_entries([good]) == []
    other = "dev" if good.role == "train" else "train"
    bad = [
        Entry(**{**good.__dict__, "name": "Requests"}),
        Entry(**{**good.__dict__, "name": "rest", "version": ">=1.0"}),
        Entry(**{**good.__dict__, "name": "gpl", "license": "GPL-3.0-or-later"}),
        Entry(**{**good.__dict__, "name": "sha", "sha256": "abc"}),
        Entry(**{**good.__dict__, "role": other}),
        Entry(**{**good.__dict__, "name": "zip", "filename": "zip-1.0.zip"}),
    ]
    problems = "\n".join(check_entries([good, *bad]))
    for needle in ("Requests: evaluated", "not one pinned", "GPL-3.0-or-later", "64 hex",
                   "fakepkg: listed twice", "the rule says", "not an sdist"):  # fmt: skip
        assert needle in problems


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("MIT", "MIT"),
        ("MIT License", "MIT"),
        ("BSD-3-Clause", "BSD"),
        ("Revised BSD License", "BSD"),
        ("Apache 2.0", "Apache-2.0"),
        ("Apache Software License", "Apache-2.0"),
        ("ISC License (ISCL)", "ISC"),
        ("Python Software Foundation License", "PSF"),
        ("MIT OR Apache-2.0", "Apache-2.0+MIT"),
        ("MIT OR GPL-3.0", None),
        ("LGPL-2.1", None),
        ("MPL-2.0", None),
        ("Apache-2.0 WITH LLVM-exception", None),
        ("Public Domain", None),
        ("", None),
    ],
)
def test_license_family(text, family):
    assert license_family(text) == family


def test_declared_license_prefers_the_expression_and_refuses_a_conflict():
    assert declared_license({"license_expression": "MIT", "license": "MIT"}) == (
        "MIT",
        "license_expression",
    )
    long_text = "Copyright (c) 2020\n\nPermission is hereby granted, free of charge ..."
    classifiers = ["License :: OSI Approved :: BSD License", "License :: OSI Approved"]
    assert declared_license({"license": long_text, "classifiers": classifiers}) == (
        "BSD License",
        "classifiers",
    )
    with pytest.raises(Unconfirmed, match="GNU"):
        declared_license(
            {
                "license": "MIT",
                "classifiers": ["License :: OSI Approved :: GNU General Public License (GPL)"],
            }
        )
    with pytest.raises(Unconfirmed, match="no license"):
        declared_license({"license": None, "classifiers": []})


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_make_entry_reads_pypi_metadata_without_the_network():
    sha = "b" * 64
    meta = {
        "info": {"name": "Fake_Pkg", "version": "2.1", "license_expression": "BSD-3-Clause"},
        "urls": [
            {"packagetype": "bdist_wheel", "filename": "fake_pkg-2.1-py3-none-any.whl",
             "url": "x", "size": 1, "digests": {"sha256": "c" * 64}},
            {"packagetype": "sdist", "filename": "fake_pkg-2.1.tar.gz", "size": 1234,
             "url": "../../packages/packages/ab/cd/ef/fake_pkg-2.1.tar.gz",
             "digests": {"sha256": sha}},
        ],
    }  # fmt: skip
    asked = []

    def opener(url, timeout):
        asked.append(url)
        return FakeResponse(json.dumps(meta).encode())

    entry = make_entry("Fake_Pkg", opener=opener)
    assert asked == ["https://pypi.org/pypi/Fake_Pkg/json"]
    assert (entry.version, entry.license, entry.license_from) == (
        "2.1",
        "BSD-3-Clause",
        "license_expression",
    )
    assert entry.url == "https://files.pythonhosted.org/packages/ab/cd/ef/fake_pkg-2.1.tar.gz"
    assert (entry.sha256, entry.size, entry.role) == (sha, 1234, role_of("Fake_Pkg"))
    meta["info"]["license_expression"] = "GPL-2.0-only"
    with pytest.raises(Unconfirmed, match="GPL"):
        make_entry("Fake_Pkg", opener=opener)
    with pytest.raises(Unconfirmed, match="evaluated"):
        make_entry("more_itertools", opener=opener)


# ---------------------------------------------------------------- download
def make_sdist(path: Path, members: dict[str, bytes | str], top: str = "fakepkg-1.0") -> Path:
    """A .tar.gz with `members` under `top`/: bytes are files, a str is a symlink target."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return path


def entry_for(archive: Path, name: str = "fakepkg", sha256: str | None = None) -> Entry:
    data = archive.read_bytes()
    return Entry(
        name=name, version="1.0", license="MIT", license_from="license", role=role_of(name),
        filename=f"{name}-1.0.tar.gz", url=archive.as_uri(), size=len(data),
        sha256=sha256 or hashlib.sha256(data).hexdigest(),
    )  # fmt: skip


def test_download_keeps_the_py_files_and_then_uses_the_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_FILE_BYTES", 1000)
    archive = make_sdist(
        tmp_path / "fakepkg-1.0.tar.gz",
        {
            "src/fakepkg/__init__.py": b'"""A fake package."""\n',
            "src/fakepkg/core.py": b"def add(a, b):\n    return a + b\n",
            "tests/test_core.py": b"def test_add():\n    pass\n",
            "README.md": b"# fake\n",
            "src/fakepkg/link.py": "/etc/passwd",
            "src/fakepkg/table.py": b"x = 1\n" * 500,
        },
    )
    cache = tmp_path / "cache"
    entry = entry_for(archive)
    trees = download([entry], cache)
    tree = trees["fakepkg"]
    assert tree == cache / "fakepkg-1.0"
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    assert files == [MARKER, "src/fakepkg/__init__.py", "src/fakepkg/core.py", "tests/test_core.py"]
    assert not any(p.is_symlink() for p in tree.rglob("*"))
    record = json.loads((tree / MARKER).read_text())
    assert record["sha256"] == entry.sha256 and record["files"] == 3
    assert record["skipped"] == {"not a regular file": 1, "too large": 1}
    assert sorted(p.name for p in cache.iterdir()) == ["fakepkg-1.0"]  # no leftovers

    def no_network(url, timeout):
        raise AssertionError(f"fetched {url} again")

    assert download([entry], cache, opener=no_network) == trees
    other = make_sdist(tmp_path / "other.tar.gz", {"other.py": b"y = 2\n"}, top="other-1.0")
    by_role = trees_by_role([entry, entry_for(other, "other")], cache)
    assert sorted(p.name for ps in by_role.values() for p in ps) == ["fakepkg-1.0", "other-1.0"]
    assert set(by_role) == {"train", "dev"}


def test_a_wrong_sha256_is_an_error_that_leaves_nothing(tmp_path: Path):
    archive = make_sdist(tmp_path / "fakepkg-1.0.tar.gz", {"fakepkg/a.py": b"a = 1\n"})
    cache = tmp_path / "cache"
    with pytest.raises(CorpusError, match=r"fakepkg 1\.0: the sha256 .* not the recorded"):
        download([entry_for(archive, sha256="0" * 64)], cache)
    assert not cache.exists() or list(cache.iterdir()) == []


@pytest.mark.parametrize("bad", ["../../evil.py", "/tmp/evil.py", "fakepkg-1.0/../../evil.py"])
def test_a_member_out_of_the_package_is_refused(tmp_path: Path, bad: str):
    archive = tmp_path / "fakepkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("fakepkg-1.0/ok.py", b"ok = 1\n"), (bad, b"import os\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    cache = tmp_path / "work" / "cache"
    with pytest.raises(CorpusError, match=r"fakepkg 1\.0: .* a path out of the package"):
        download([entry_for(archive)], cache)
    assert list(cache.iterdir()) == []
    assert not list(tmp_path.rglob("evil.py"))


def test_an_unreachable_address_is_a_clear_error(tmp_path: Path):
    archive = tmp_path / "fakepkg-1.0.tar.gz"
    archive.write_bytes(b"")
    entry = entry_for(archive)
    archive.unlink()
    with pytest.raises(CorpusError, match=r"fakepkg 1\.0: cannot download"):
        download([entry], tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_name_that_is_no_plain_word_is_not_stored(tmp_path: Path):
    archive = make_sdist(tmp_path / "fakepkg-1.0.tar.gz", {"a.py": b"a = 1\n"})
    entry = entry_for(archive)
    for bad in ({"version": "../../x"}, {"name": "a/b"}):
        with pytest.raises(CorpusError, match="not a name and version to store"):
            download([Entry(**{**entry.__dict__, **bad})], tmp_path / "cache")
    assert not (tmp_path / "x").exists()


def test_vendored_finds_copies_of_other_packages(tmp_path: Path):
    for rel in ("pkg/__init__.py", "pkg/_vendor/six.py", "pkg/compat/requests/__init__.py",
                "pkg/rich.py", "pkg/richer.py", "tests/test_requests.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    assert vendored(tmp_path) == ["pkg/_vendor", "pkg/compat/requests", "pkg/rich.py"]
